import { z } from 'zod';
import type {
  AttemptRecord,
  AuditRecord,
  ConflictField,
  DeadLetterRecord,
  ExpireResult,
  Json,
  OperationRecord,
  SettleMetrics,
  Status,
  TenantStats,
} from './types.js';

// ---------------------------------------------------------------------------------------------
// Row schemas: every row that crosses into TypeScript is validated. Column types are accepted
// in the shapes common type parsers produce (Date or string or epoch ms for timestamptz; bigint,
// string or safe integer for int8), so a caller's own pool works too.
// ---------------------------------------------------------------------------------------------

export const timestamp = z.union([z.date(), z.string(), z.number()]).transform((value, ctx) => {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) {
    ctx.addIssue({ code: 'custom', message: `not a timestamp: ${String(value)}` });
    return z.NEVER;
  }
  return date;
});

export const int8 = z
  .union([z.bigint(), z.string().regex(/^-?\d+$/), z.number().int().refine(Number.isSafeInteger)])
  .transform((value) => BigInt(value));

const int4 = z.number().int();
/** A jsonb column: already parsed JSON (SQL NULL arrives as null too). */
const json = z.custom<Json>((value) => value !== undefined);
export const status = z.enum([
  'pending',
  'running',
  'unknown',
  'conflict',
  'failed',
  'completed',
]) satisfies z.ZodType<Status>;
const conflictFields = z.array(z.enum(['request', 'binding']) satisfies z.ZodType<ConflictField>);

/**
 * Outcomes that disclose nothing (a conflict, an invalid token) carry only the columns listed:
 * any other non-NULL column would be the engine disclosing state it promised to keep, so the
 * row is refused (SettleRowValidationError) instead of silently dropping the column.
 */
function requireUndisclosed(row: Record<string, unknown>, kept: readonly string[], ctx: z.RefinementCtx): void {
  for (const column in row) {
    if (row[column] !== null && !kept.includes(column)) {
      ctx.addIssue({
        code: 'custom',
        path: [column],
        message: `must be NULL with outcome ${String(row.outcome)} (nothing is disclosed)`,
      });
    }
  }
}

const deadLetterReason = z.enum(['attempts_exhausted', 'needs_reconciliation']);

export const claimRow = z
  .object({
    outcome: z.enum(['acquired', 'in_progress', 'replay', 'failed', 'unknown', 'in_doubt', 'conflict', 'refused']),
    status: status.nullable(),
    attempt: int4.nullable(),
    lease_token: z.string().nullable(),
    lease_expires_at: timestamp.nullable(),
    retry_after_ms: int4.nullable(),
    fingerprint: z.string().nullable(),
    result: json,
    settled_attempt: int4.nullable(),
    error: json,
    dead_lettered: z.boolean().nullable(),
    conflict_on: conflictFields.nullable(),
    reason: z.enum(['binding_revoked']).nullable(),
    dead_letter_reason: deadLetterReason.nullish(),
  })
  .superRefine((row, ctx) => {
    if (row.outcome === 'conflict') requireUndisclosed(row, ['outcome', 'conflict_on'], ctx);
    if (row.outcome === 'refused') requireUndisclosed(row, ['outcome', 'reason'], ctx);
  });
export type ClaimRow = z.output<typeof claimRow>;

export const heartbeatRow = z
  .object({
    outcome: z.enum(['extended', 'fenced']),
    reason: z.enum(['invalid_token', 'superseded', 'settled', 'lease_released', 'binding_revoked']).nullable(),
    status: status.nullable(),
    lease_expires_at: timestamp.nullable(),
  })
  .superRefine((row, ctx) => {
    if (row.outcome === 'fenced' && (row.reason === 'invalid_token' || row.reason === 'binding_revoked')) {
      requireUndisclosed(row, ['outcome', 'reason'], ctx);
    }
  });
export type HeartbeatRow = z.output<typeof heartbeatRow>;

export const observationRow = z
  .object({
    outcome: z.enum(['settled', 'recorded', 'duplicate', 'already_settled', 'fenced', 'conflict']),
    reason: z
      .enum([
        'current_attempt',
        'superseded_attempt',
        'final_failure',
        'attempts_exhausted',
        'retryable_failure',
        'outcome_unknown',
        'late_success',
        'attempt_already_observed',
        'invalid_token',
        'superseded',
        'settled',
        'lease_released',
        'lock_mismatch',
        'binding_revoked',
        'needs_reconciliation',
        'attempt_conflicted',
      ])
      .nullable(),
    status: status.nullable(),
    attempt: int4.nullable(),
    settled_attempt: int4.nullable(),
    result: json,
    error: json,
    conflict_on: conflictFields.nullable(),
    dead_lettered: z.boolean().nullish(),
    dead_letter_reason: deadLetterReason.nullish(),
  })
  .superRefine((row, ctx) => {
    if (row.outcome === 'conflict') {
      requireUndisclosed(row, ['outcome', 'reason', 'conflict_on'], ctx);
      if (row.reason !== 'lock_mismatch')
        ctx.addIssue({ code: 'custom', path: ['reason'], message: 'must be lock_mismatch with outcome conflict' });
    } else if (row.outcome === 'fenced' && (row.reason === 'invalid_token' || row.reason === 'binding_revoked')) {
      requireUndisclosed(row, ['outcome', 'reason'], ctx);
    }
  });
export type ObservationRow = z.output<typeof observationRow>;

/** A row of settle.get (type settle.get_result): only `found` may carry state. */
export const getRow = z
  .object({
    outcome: z.enum(['found', 'not_found', 'conflict', 'refused']),
    reason: z.enum(['reauthenticated', 'lock_mismatch', 'binding_revoked']).nullable(),
    status: status.nullable(),
    attempt: int4.nullable(),
    settled_attempt: int4.nullable(),
    result: json,
    error: json,
    dead_lettered: z.boolean().nullable(),
    in_flight: z.boolean().nullable(),
    conflict_on: conflictFields.nullable(),
    created_at: timestamp.nullable(),
  })
  .superRefine((row, ctx) => {
    if (row.outcome === 'not_found') requireUndisclosed(row, ['outcome'], ctx);
    if (row.outcome === 'conflict') requireUndisclosed(row, ['outcome', 'reason', 'conflict_on'], ctx);
    if (row.outcome === 'refused') requireUndisclosed(row, ['outcome', 'reason'], ctx);
  });
export type GetRow = z.output<typeof getRow>;

export const operationRow = z
  .object({
    tenant: z.string(),
    key: z.string(),
    status,
    status_rank: int4,
    attempt: int4,
    max_attempts: int4,
    in_flight: z.boolean(),
    lease_expires_at: timestamp.nullable(),
    result: json,
    settled_attempt: int4.nullable(),
    settled_at: timestamp.nullable(),
    error: json,
    dead_lettered_at: timestamp.nullable(),
    dead_letter_reason: deadLetterReason.nullable(),
    redrive_count: int4,
    fingerprint: z.string(),
    principal: z.string(),
    scopes: z.array(z.string()),
    binding_generation: int8,
    request: json,
    created_at: timestamp,
    updated_at: timestamp,
  })
  .transform(
    (row): OperationRecord => ({
      tenant: row.tenant,
      key: row.key,
      status: row.status,
      statusRank: row.status_rank,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      inFlight: row.in_flight,
      leaseExpiresAt: row.lease_expires_at,
      result: row.result,
      settledAttempt: row.settled_attempt,
      settledAt: row.settled_at,
      error: row.error,
      deadLetteredAt: row.dead_lettered_at,
      deadLetterReason: row.dead_letter_reason,
      redriveCount: row.redrive_count,
      fingerprint: row.fingerprint,
      principal: row.principal,
      scopes: row.scopes,
      bindingGeneration: row.binding_generation,
      request: row.request,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
    }),
  );

export const attemptRow = z
  .object({
    tenant: z.string(),
    key: z.string(),
    attempt: int4,
    worker: z.string().nullable(),
    claimed_at: timestamp,
    ended_at: timestamp.nullable(),
    end_reason: z.enum(['observed', 'lease_expired', 'settled_elsewhere', 'exhausted']).nullable(),
    observation: z.enum(['unknown', 'conflict', 'failed', 'completed']).nullable(),
    observed_at: timestamp.nullable(),
    retryable: z.boolean().nullable(),
    error: json,
    late_result: json,
    settled: z.boolean(),
  })
  .transform(
    (row): AttemptRecord => ({
      tenant: row.tenant,
      key: row.key,
      attempt: row.attempt,
      worker: row.worker,
      claimedAt: row.claimed_at,
      endedAt: row.ended_at,
      endReason: row.end_reason,
      observation: row.observation,
      observedAt: row.observed_at,
      retryable: row.retryable,
      error: row.error,
      lateResult: row.late_result,
      settled: row.settled,
    }),
  );

export const auditRow = z
  .object({
    tenant: z.string(),
    key: z.string(),
    audit_id: int8,
    at: timestamp,
    event: z.string(),
    outcome: z.string(),
    attempt: int4.nullable(),
    status_before: status.nullable(),
    status_after: status.nullable(),
    actor: z.string().nullable(),
    detail: json,
  })
  .transform(
    (row): AuditRecord => ({
      tenant: row.tenant,
      key: row.key,
      auditId: row.audit_id,
      at: row.at,
      event: row.event,
      outcome: row.outcome,
      attempt: row.attempt,
      statusBefore: row.status_before,
      statusAfter: row.status_after,
      actor: row.actor,
      detail: row.detail,
    }),
  );

export const deadLetterRow = z
  .object({
    tenant: z.string(),
    key: z.string(),
    status,
    reason: deadLetterReason,
    attempt: int4,
    max_attempts: int4,
    error: json,
    dead_lettered_at: timestamp,
    redrive_count: int4,
    created_at: timestamp,
    updated_at: timestamp,
  })
  .transform(
    (row): DeadLetterRecord => ({
      tenant: row.tenant,
      key: row.key,
      status: row.status,
      reason: row.reason,
      attempt: row.attempt,
      maxAttempts: row.max_attempts,
      error: row.error,
      deadLetteredAt: row.dead_lettered_at,
      redriveCount: row.redrive_count,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
    }),
  );

export const statsRow = z
  .object({
    tenant: z.string(),
    operations: int8,
    pending: int8,
    running: int8,
    unknown: int8,
    conflict: int8,
    failed: int8,
    completed: int8,
    dead_lettered: int8,
    in_flight: int8,
    lapsed_leases: int8,
    attempts: int8,
  })
  .transform(
    (row): TenantStats => ({
      tenant: row.tenant,
      operations: row.operations,
      pending: row.pending,
      running: row.running,
      unknown: row.unknown,
      conflict: row.conflict,
      failed: row.failed,
      completed: row.completed,
      deadLettered: row.dead_lettered,
      inFlight: row.in_flight,
      lapsedLeases: row.lapsed_leases,
      attempts: row.attempts,
    }),
  );

export const metricsRow = z
  .object({
    operations_in_flight: int8,
    lapsed_leases: int8,
    operations_unknown: int8,
    oldest_unknown_age_seconds: z.number(),
    operations_conflict: int8,
    dead_letters_failed: int8,
    dead_letters_needs_reconciliation: int8,
    oldest_dead_letter_age_seconds: z.number(),
    conflicts_recent: int8,
    refused_observations_recent: int8,
    recent_window_seconds: int4,
    in_doubt_under_5m: int8,
    in_doubt_5m_to_1h: int8,
    in_doubt_over_1h: int8,
  })
  .transform(
    (row): SettleMetrics => ({
      operationsInFlight: row.operations_in_flight,
      lapsedLeases: row.lapsed_leases,
      operationsUnknown: row.operations_unknown,
      oldestUnknownAgeSeconds: row.oldest_unknown_age_seconds,
      operationsConflict: row.operations_conflict,
      deadLettersFailed: row.dead_letters_failed,
      deadLettersNeedsReconciliation: row.dead_letters_needs_reconciliation,
      oldestDeadLetterAgeSeconds: row.oldest_dead_letter_age_seconds,
      conflictsRecent: row.conflicts_recent,
      refusedObservationsRecent: row.refused_observations_recent,
      recentWindowSeconds: row.recent_window_seconds,
      inDoubt: { under5m: row.in_doubt_under_5m, from5mTo1h: row.in_doubt_5m_to_1h, over1h: row.in_doubt_over_1h },
    }),
  );

export const expireRow = z
  .object({ expired: int4, dead_lettered: int4 })
  .transform((row): ExpireResult => ({ expired: row.expired, deadLettered: row.dead_lettered }));

export const purgeRow = z.object({ purged: int4 });
