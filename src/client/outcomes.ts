import { SettleRowValidationError } from './errors.js';
import type { ClaimRow, GetRow, HeartbeatRow, ObservationRow } from './rows.js';
import type {
  Binding,
  CanonicalState,
  ClaimOutcome,
  HeartbeatOutcome,
  Json,
  LockedRead,
  Observation,
} from './types.js';

// The SQL result types carry every column for every outcome (NULL where it does not apply).
// These functions turn them into discriminated unions, checking that each outcome carries
// the columns its contract promises.

function required<T>(value: T | null, column: string, outcome: string): T {
  if (value === null) {
    throw new SettleRowValidationError(`outcome ${outcome} arrived without ${column}`, [
      { path: [column], message: `required for outcome ${outcome}` },
    ]);
  }
  return value;
}

export function toClaimOutcome(
  row: ClaimRow,
  tenant: string,
  key: string,
  binding: Binding,
  request: Json,
): ClaimOutcome {
  const { outcome } = row;
  switch (outcome) {
    case 'acquired':
      return {
        outcome,
        status: required(row.status, 'status', outcome),
        attempt: {
          tenant,
          key,
          attempt: required(row.attempt, 'attempt', outcome),
          leaseToken: required(row.lease_token, 'lease_token', outcome),
          leaseExpiresAt: required(row.lease_expires_at, 'lease_expires_at', outcome),
          fingerprint: required(row.fingerprint, 'fingerprint', outcome),
          binding,
          request,
        },
      };
    case 'in_progress':
      return {
        outcome,
        status: required(row.status, 'status', outcome),
        attempt: required(row.attempt, 'attempt', outcome),
        leaseExpiresAt: required(row.lease_expires_at, 'lease_expires_at', outcome),
        retryAfterMs: required(row.retry_after_ms, 'retry_after_ms', outcome),
      };
    case 'replay':
      return {
        outcome,
        result: row.result,
        settledAttempt: required(row.settled_attempt, 'settled_attempt', outcome),
        attempt: required(row.attempt, 'attempt', outcome),
      };
    case 'failed':
      return {
        outcome,
        error: row.error,
        deadLettered: required(row.dead_lettered, 'dead_lettered', outcome),
        deadLetterReason: row.dead_letter_reason ?? null,
        attempt: required(row.attempt, 'attempt', outcome),
      };
    case 'unknown':
      if (row.dead_letter_reason !== 'needs_reconciliation' || row.dead_lettered !== true) {
        throw new SettleRowValidationError('outcome unknown arrived without dead_letter_reason needs_reconciliation', [
          { path: ['dead_letter_reason'], message: 'required for outcome unknown' },
        ]);
      }
      return {
        outcome,
        status: required(row.status, 'status', outcome),
        attempt: required(row.attempt, 'attempt', outcome),
        deadLettered: true,
        deadLetterReason: 'needs_reconciliation',
      };
    case 'in_doubt':
      if (row.status !== 'unknown' || row.dead_lettered !== false) {
        throw new SettleRowValidationError('outcome in_doubt arrived without status unknown and dead_lettered false', [
          { path: ['status'], message: 'required for outcome in_doubt' },
        ]);
      }
      return { outcome, status: 'unknown', attempt: required(row.attempt, 'attempt', outcome), deadLettered: false };
    case 'conflict':
      return { outcome, conflictOn: required(row.conflict_on, 'conflict_on', outcome) };
    case 'refused':
      return { outcome, reason: required(row.reason, 'reason', outcome) };
  }
}

export function toLockedRead(row: GetRow): LockedRead {
  const { outcome } = row;
  switch (outcome) {
    case 'found':
      return {
        outcome,
        reason: row.reason === 'reauthenticated' ? row.reason : null,
        status: required(row.status, 'status', outcome),
        attempt: required(row.attempt, 'attempt', outcome),
        settledAttempt: row.settled_attempt,
        result: row.result,
        error: row.error,
        deadLettered: required(row.dead_lettered, 'dead_lettered', outcome),
        inFlight: required(row.in_flight, 'in_flight', outcome),
        createdAt: required(row.created_at, 'created_at', outcome),
      };
    case 'not_found':
      return { outcome };
    case 'conflict':
      return { outcome, conflictOn: required(row.conflict_on, 'conflict_on', outcome) };
    case 'refused':
      if (row.reason !== 'binding_revoked') {
        throw new SettleRowValidationError(`outcome refused arrived with reason ${String(row.reason)}`, [
          { path: ['reason'], message: 'expected binding_revoked' },
        ]);
      }
      return { outcome, reason: row.reason };
  }
}

export function toHeartbeatOutcome(row: HeartbeatRow): HeartbeatOutcome {
  if (row.outcome === 'extended') {
    return {
      outcome: 'extended',
      status: required(row.status, 'status', 'extended'),
      leaseExpiresAt: required(row.lease_expires_at, 'lease_expires_at', 'extended'),
    };
  }
  return { outcome: 'fenced', reason: required(row.reason, 'reason', 'fenced'), status: row.status };
}

const REASONS = {
  settled: ['current_attempt', 'superseded_attempt', 'lease_released', 'final_failure', 'attempts_exhausted'],
  recorded: ['retryable_failure', 'outcome_unknown', 'needs_reconciliation'],
  already_settled: ['late_success', 'attempt_already_observed'],
  fenced: ['superseded', 'settled', 'lease_released', 'attempt_conflicted'],
} as const;

function reasonOf<O extends keyof typeof REASONS>(row: ObservationRow, outcome: O): (typeof REASONS)[O][number] {
  const allowed: readonly string[] = REASONS[outcome];
  if (row.reason === null || !allowed.includes(row.reason)) {
    throw new SettleRowValidationError(`outcome ${outcome} arrived with reason ${String(row.reason)}`, [
      { path: ['reason'], message: `expected one of ${allowed.join(', ')}` },
    ]);
  }
  return row.reason as (typeof REASONS)[O][number];
}

export function toObservation(row: ObservationRow): Observation {
  const { outcome } = row;
  if (outcome === 'conflict') {
    return { outcome, reason: 'lock_mismatch', conflictOn: required(row.conflict_on, 'conflict_on', outcome) };
  }
  if (outcome === 'fenced' && (row.reason === 'invalid_token' || row.reason === 'binding_revoked')) {
    return { outcome, reason: row.reason };
  }
  const state: CanonicalState = {
    status: required(row.status, 'status', outcome),
    attempt: required(row.attempt, 'attempt', outcome),
    settledAttempt: row.settled_attempt,
    result: row.result,
    error: row.error,
    deadLettered: row.dead_lettered ?? false,
    deadLetterReason: row.dead_letter_reason ?? null,
  };
  switch (outcome) {
    case 'duplicate':
      return { outcome, reason: null, ...state };
    case 'settled':
      return { outcome, reason: reasonOf(row, outcome), ...state };
    case 'recorded':
      return { outcome, reason: reasonOf(row, outcome), ...state };
    case 'already_settled':
      return { outcome, reason: reasonOf(row, outcome), ...state };
    case 'fenced':
      return { outcome, reason: reasonOf(row, outcome), ...state };
  }
}
