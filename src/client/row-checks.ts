import { claimRow, observationRow } from './rows.js';

/**
 * Hand-written checks of the two rows every run() reads (settle.claim's and settle.complete's),
 * in front of their zod schemas: zod's object, union, transform and refinement machinery cost
 * more than the checks themselves, on every call. A check answers the row itself when it is
 * exactly what the schema accepts and outputs unchanged: a plain object (no inherited columns) with no column beyond
 * the schema's, every column of the type the client's own pool produces (a valid Date for
 * timestamptz, a safe integer for int4), and an outcome that discloses something (the
 * conflict / refused / fenced rows, whose other columns must be NULL, are rare: zod checks
 * them). Anything else answers `undefined` and goes to the schema, which accepts it (e.g. a
 * timestamp as a string, from a caller's own pool) or refuses it with every issue.
 * test/client/row-checks.test.ts holds both paths to the same value on random rows.
 */
export type RowCheck = (row: unknown) => object | undefined;

const STATUS = new Set(['pending', 'running', 'unknown', 'conflict', 'failed', 'completed']);
const DEAD_LETTER_REASON = new Set(['attempts_exhausted', 'needs_reconciliation']);
const CLAIM_OUTCOME = new Set(['acquired', 'in_progress', 'replay', 'failed', 'unknown', 'in_doubt']);
const OBSERVATION_OUTCOME = new Set(['settled', 'recorded', 'duplicate', 'already_settled', 'fenced']);
const OBSERVATION_REASON = new Set([
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
]);
const CLAIM_COLUMNS = new Set(Object.keys(claimRow.shape));
const OBSERVATION_COLUMNS = new Set(Object.keys(observationRow.shape));

const isPlain = (row: unknown): row is Record<string, unknown> => {
  if (typeof row !== 'object' || row === null) return false;
  const prototype: unknown = Object.getPrototypeOf(row);
  return prototype === Object.prototype || prototype === null;
};
const int4OrNull = (value: unknown): boolean =>
  value === null || (typeof value === 'number' && Number.isSafeInteger(value));
const stringOrNull = (value: unknown): boolean => value === null || typeof value === 'string';
const booleanOrNull = (value: unknown): boolean => value === null || typeof value === 'boolean';
const oneOfOrNull = (set: ReadonlySet<string>, value: unknown): boolean =>
  value === null || (typeof value === 'string' && set.has(value));
const dateOrNull = (value: unknown): boolean =>
  value === null || (value instanceof Date && !Number.isNaN(value.getTime()));
const conflictOnOrNull = (value: unknown): boolean => {
  if (value === null) return true;
  if (!Array.isArray(value)) return false;
  for (let i = 0; i < value.length; i += 1) if (value[i] !== 'request' && value[i] !== 'binding') return false;
  return true;
};
/** Only the schema's columns, all of them its own (a column not in the row is then undefined, as zod reads it). */
const onlyColumns = (row: Record<string, unknown>, columns: ReadonlySet<string>): boolean => {
  for (const column in row) if (!columns.has(column)) return false;
  return true;
};

/** claimRow's answer for the rows it accepts unchanged (see above); undefined: ask claimRow. */
export const checkClaimRow: RowCheck = (row) => {
  if (!isPlain(row) || !onlyColumns(row, CLAIM_COLUMNS)) return undefined;
  const outcome = row.outcome;
  if (typeof outcome !== 'string' || !CLAIM_OUTCOME.has(outcome)) return undefined;
  if (
    oneOfOrNull(STATUS, row.status) &&
    int4OrNull(row.attempt) &&
    stringOrNull(row.lease_token) &&
    dateOrNull(row.lease_expires_at) &&
    int4OrNull(row.retry_after_ms) &&
    stringOrNull(row.fingerprint) &&
    row.result !== undefined &&
    int4OrNull(row.settled_attempt) &&
    row.error !== undefined &&
    booleanOrNull(row.dead_lettered) &&
    conflictOnOrNull(row.conflict_on) &&
    (row.reason === null || row.reason === 'binding_revoked') &&
    (row.dead_letter_reason === undefined || oneOfOrNull(DEAD_LETTER_REASON, row.dead_letter_reason))
  ) {
    return row;
  }
  return undefined;
};

/** observationRow's answer for the rows it accepts unchanged; undefined: ask observationRow. */
export const checkObservationRow: RowCheck = (row) => {
  if (!isPlain(row) || !onlyColumns(row, OBSERVATION_COLUMNS)) return undefined;
  const { outcome, reason } = row;
  if (typeof outcome !== 'string' || !OBSERVATION_OUTCOME.has(outcome)) return undefined;
  if (outcome === 'fenced' && (reason === 'invalid_token' || reason === 'binding_revoked')) return undefined;
  if (
    oneOfOrNull(OBSERVATION_REASON, reason) &&
    oneOfOrNull(STATUS, row.status) &&
    int4OrNull(row.attempt) &&
    int4OrNull(row.settled_attempt) &&
    row.result !== undefined &&
    row.error !== undefined &&
    conflictOnOrNull(row.conflict_on) &&
    (row.dead_lettered === undefined || booleanOrNull(row.dead_lettered)) &&
    (row.dead_letter_reason === undefined || oneOfOrNull(DEAD_LETTER_REASON, row.dead_letter_reason))
  ) {
    return row;
  }
  return undefined;
};

/** The hand-written check in front of a row schema, if it has one. */
export const ROW_CHECKS: ReadonlyMap<unknown, RowCheck> = new Map<unknown, RowCheck>([
  [claimRow, checkClaimRow],
  [observationRow, checkObservationRow],
]);
