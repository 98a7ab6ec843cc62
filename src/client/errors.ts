import {
  BackendTerminatedError,
  BackendTerminatedUnexpectedlyError,
  ConnectionError,
  IdleTransactionTimeoutError,
  StatementCancelledError,
  StatementTimeoutError,
} from 'slonik';
import type { ConflictField, HeartbeatFenceReason, RunOutcome, UnknownReason } from './types.js';

/** A problem with an input, found by zod before the call or by the database (SE001-SE008). */
export interface InputIssue {
  readonly path: readonly PropertyKey[];
  readonly message: string;
}

/** Fields every SettleError carries: SQLSTATE, parsed DETAIL, HINT and the cause. */
export interface SettleErrorOptions {
  readonly code: string;
  /** The SQLSTATE the database raised; null when the error was detected client-side. */
  readonly sqlstate?: string | null;
  readonly detail?: Record<string, unknown> | null;
  readonly hint?: string | null;
  readonly cause?: unknown;
}

/**
 * Base of every error the client throws on purpose. `code` is the SQLSTATE for database errors
 * (so slonik's transaction retry still recognizes 40001) and a stable name otherwise.
 */
export class SettleError extends Error {
  readonly code: string;
  readonly sqlstate: string | null;
  /** The DETAIL of the database error, parsed from JSON (ids of the operation involved). */
  readonly detail: Record<string, unknown> | null;
  readonly hint: string | null;

  constructor(message: string, options: SettleErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code;
    this.sqlstate = options.sqlstate ?? null;
    this.detail = options.detail ?? null;
    this.hint = options.hint ?? null;
  }
}

/** Bad input: thrown before any round trip (sqlstate null, `issues` from zod) or by the engine. */
export class SettleInputError extends SettleError {
  readonly issues: readonly InputIssue[];

  constructor(message: string, options: SettleErrorOptions & { readonly issues?: readonly InputIssue[] }) {
    super(message, options);
    this.issues = options.issues ?? [];
  }
}

/** SE001 */ export class InvalidTenantError extends SettleInputError {}
/** SE002 */ export class InvalidKeyError extends SettleInputError {}
/** SE003 */ export class InvalidBindingError extends SettleInputError {}
/** SE004 */ export class InvalidRequestError extends SettleInputError {}
/** SE005 */ export class InvalidResultError extends SettleInputError {}
/** SE006 */ export class InvalidFailureError extends SettleInputError {}
/** SE007 */ export class InvalidLeaseError extends SettleInputError {}
/** SE008 */ export class InvalidArgumentError extends SettleInputError {}

/** SE010: no operation under (tenant, key). */
export class OperationNotFoundError extends SettleError {}
/** SE011: redrive refused because the operation is not dead-lettered. */
export class NotDeadLetteredError extends SettleError {}
/** SE012: redrive refused because the request differs from the reservation. */
export class RedriveRequestMismatchError extends SettleError {}
/** SE013: this login role holds tenant grants (settle.grant_tenant) and not this tenant's. */
export class TenantNotGrantedError extends SettleError {}
/** SE014: purge refused: older_than is shorter than the configured minimum retention. */
export class RetentionTooShortError extends SettleError {}
/** SE019: this login role is bound to tenants and the call reaches beyond them (engine-wide setting, unbinding, another tenant's role). */
export class BindingScopeExceededError extends SettleError {}

/** SE040: no feed consumer of this name is registered. */
export class FeedConsumerNotFoundError extends SettleError {}
/** SE041: a feed consumer of this name exists with other tenants or lanes. */
export class FeedConsumerExistsError extends SettleError {}
/** SE042: the lease on a feed lane is no longer held (taken over after it lapsed, or a reset). */
export class FeedLeaseLostError extends SettleError {}
/** SE050: resolve refused: the operation is pending or running (nothing lost its outcome yet). */
export class NotReconcilableError extends SettleError {}
/** SE051: a failed resolution refused while an attempt holds a lease (it may still take effect). */
export class ResolveLeaseHeldError extends SettleError {}
/** SE052: resolve refused: the fingerprint presented is not the reservation's. */
export class ResolveFingerprintMismatchError extends SettleError {}
/** SE053: resolve refused: the operation moved on since the evidence was read (a newer attempt, or another status). */
export class ResolveEvidenceStaleError extends SettleError {}

/** SE060-SE063: a batch call's arrays are malformed (too many keys, none, not one per key, a NULL). */
export class InvalidBatchError extends SettleInputError {}
/** SE060: more keys than LIMITS.maxBatchKeys in one batch call (SE064: more bytes, a subclass). */
export class BatchTooLargeError extends InvalidBatchError {}
/** SE064: a batch call's requests or results hold more than LIMITS.maxBatchBytes of JSON text together. */
export class BatchTooManyBytesError extends BatchTooLargeError {}
/** SE061: a batch call without keys. */
export class BatchEmptyError extends InvalidBatchError {}
/** SE062: a per-key array of a batch call does not have one element per key. */
export class BatchShapeMismatchError extends InvalidBatchError {}
/** SE063: a batch array, or one of its elements, is NULL. */
export class BatchNullElementError extends InvalidBatchError {}

/** SE02x: a write broke an invariant the schema enforces (lattice, immutability, append-only). */
export class IntegrityViolationError extends SettleError {}
/** SE020 */ export class ReservationLockImmutableError extends IntegrityViolationError {}
/** SE021 */ export class StatusDowngradeError extends IntegrityViolationError {}
/** SE022 */ export class ResultImmutableError extends IntegrityViolationError {}
/** SE023 */ export class AuditLogAppendOnlyError extends IntegrityViolationError {}
/** SE024 */ export class AttemptSettlementImmutableError extends IntegrityViolationError {}
/** SE025 */ export class DeleteRefusedError extends IntegrityViolationError {}

/** SE030: pg-settle needs a UTF8 database. */
export class DatabaseEncodingError extends SettleError {}
/** SE031: `pg-settle distribute` on a database without Citus (or not migrated yet). */
export class CitusUnavailableError extends SettleError {}

/** The connection was refused, lost or terminated (08xxx, 57P01-57P03, socket errors). */
export class SettleConnectionError extends SettleError {}
/** The statement was cancelled: statement_timeout or a cancel request (57014). */
export class SettleTimeoutError extends SettleError {}
/** A transient conflict (40001, 40P01, 55P03); retried transparently outside your transactions. */
export class SettleRetryableError extends SettleError {}
/**
 * The database refused to write (25006, read_only_sql_transaction): the client reached a hot
 * standby (as right after a failover, until its connections reach the new primary), or a login
 * or database with `default_transaction_read_only`. The call wrote nothing, so the same call is
 * safe to repeat once it reaches a primary; the service is unavailable for writes until then.
 */
export class SettleReadOnlyError extends SettleError {}
/** Any other database error (permission denied, ...), with its SQLSTATE. */
export class SettleDatabaseError extends SettleError {}
/**
 * The statement committed on the server it ran on, but PostgreSQL cancelled its wait for the
 * synchronous standby and answered with the warning "canceling wait for synchronous
 * replication": the commit is not confirmed as replicated and is lost if that server fails
 * before the standby catches up. Whatever rows came back, the call's outcome is unknown: do not
 * report it as done; retry it with the same arguments, or re-read, once replication is back.
 * `notices` holds the server's messages. Recognised by that message text (the only part of a
 * notice slonik 49 passes on), so a server with non-English `lc_messages` is not recognised.
 */
export class SettleCommitUnconfirmedError extends SettleError {
  readonly notices: readonly string[];
  constructor(message: string, notices: readonly string[]) {
    super(message, { code: 'COMMIT_UNCONFIRMED', sqlstate: '01000' });
    this.notices = notices;
  }
}

/**
 * The database has no (or an incomplete) pg-settle schema: one of the client's own statements
 * met `3F000` (schema "settle" does not exist), `42P01` (relation "settle.…" does not exist) or
 * `42883` (function settle.… does not exist). Run `pg-settle migrate` (or `migrate()` from the
 * package) against this database. `sqlstate` keeps the code PostgreSQL raised.
 */
export class SettleNotMigratedError extends SettleError {
  constructor(sqlstate: string, cause: unknown) {
    super(
      `pg-settle is not installed in this database (SQLSTATE ${sqlstate}: ${cause instanceof Error ? cause.message : String(cause)}): run \`pg-settle migrate\``,
      {
        code: 'NOT_MIGRATED',
        sqlstate,
        hint: 'Run `pg-settle migrate --database-url <url>` (or migrate(url) from the package) as a role that may create schemas and roles.',
        cause,
      },
    );
  }
}

/** SQLSTATEs that mean "the settle schema, or an object of it, is missing". */
const NOT_MIGRATED_SQLSTATES = new Set(['3F000', '42P01', '42883']);

/**
 * For the client's own statements only (they name nothing but objects of the settle schema):
 * a missing schema, relation or function means the database was not migrated. A user's own SQL
 * that meets 42P01 is not ours to reinterpret, so mapDatabaseError leaves these codes alone.
 */
export function notMigratedError(error: Error): SettleNotMigratedError | null {
  const sqlstate = error instanceof SettleError ? error.sqlstate : null;
  return sqlstate !== null && NOT_MIGRATED_SQLSTATES.has(sqlstate) ? new SettleNotMigratedError(sqlstate, error) : null;
}

/** A row from the database did not match the expected shape (schema drift or a wrong view). */
export class SettleRowValidationError extends SettleError {
  readonly issues: readonly InputIssue[];
  constructor(message: string, issues: readonly InputIssue[]) {
    super(message, { code: 'ROW_VALIDATION' });
    this.issues = issues;
  }
}

// Thrown by run() and by functions wrapped with settle.idempotent(): outcomes of the client's own
// protocol, never mapped from a SQLSTATE.

/** Why `signal` was aborted. */
export class LeaseLostError extends SettleError {
  readonly reason: HeartbeatFenceReason | 'lease_expired';
  constructor(reason: HeartbeatFenceReason | 'lease_expired', cause?: unknown) {
    super(`lease lost: ${reason}`, { code: 'LEASE_LOST', cause });
    this.reason = reason;
  }
}

/**
 * The effect ran but returned something that cannot be stored as its result (not JSON, or not
 * what the `result` schema accepts). The attempt was reported unknown, so the operation is not
 * settled and no later run() runs the effect again without reconciling first. A bug in the effect.
 */
export class EffectResultError extends SettleInputError {}

/** An earlier attempt reported unknown and this run() had no way to reconcile: nothing ran. */
export class ReconciliationRequiredError extends SettleError {}

/** A stored result (replay, or another attempt's) does not match the `result` schema. */
export class StoredResultMismatchError extends SettleError {}

/** The run() outcomes that are not a settled result: what an idempotent call throws. */
export type UnsettledOutcome = Exclude<RunOutcome<never>, { readonly outcome: 'completed' | 'replay' }>;

/**
 * Thrown by a function wrapped with `settle.idempotent()` for every run() outcome other than a
 * result (`completed`, `replay`): `outcome` is run()'s answer, `tenant` and `key` the operation.
 * Catch a subclass for one outcome, or this class and switch on `outcome.outcome`.
 */
export class IdempotentCallError extends SettleError {
  /** run()'s answer for this call. */
  readonly outcome: UnsettledOutcome;
  /** The operation's tenant. */
  readonly tenant: string;
  /** The operation's idempotency key. */
  readonly key: string;

  constructor(
    message: string,
    outcome: UnsettledOutcome,
    ref: { readonly tenant: string; readonly key: string },
    code: string,
  ) {
    const cause = 'cause' in outcome ? outcome.cause : undefined;
    super(message, { code, cause, detail: { tenant: ref.tenant, key: ref.key } });
    this.outcome = outcome;
    this.tenant = ref.tenant;
    this.key = ref.key;
  }
}

/**
 * `in_progress`: another call holds the key's lease after `waitForMs`; nothing ran here. Retry
 * after `retryAfterMs` (a completed call is then replayed).
 */
export class OperationInProgressError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'in_progress' }>;
  /** Milliseconds until the holder's lease lapses, by the database clock. */
  get retryAfterMs(): number {
    return this.outcome.retryAfterMs;
  }
}

/**
 * `conflict`: the key is reserved for another request (`conflictOn: ['request']`, the call's
 * arguments differ from the first call's) or another binding (`['binding']`); nothing ran and
 * nothing of the other call is disclosed. Use a new key for a new intent.
 */
export class IdempotencyConflictError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'conflict' }>;
  /** What differs from the reservation. */
  get conflictOn(): readonly ConflictField[] {
    return this.outcome.conflictOn;
  }
}

/** `refused`: the binding generation presented is revoked (settle.revoke_binding); nothing ran. */
export class BindingRevokedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'refused' }>;
}

/**
 * `failed`: the function threw an error classified retryable or final (`cause` is what it threw),
 * or the operation had failed before. `final: false`: a later call with the same arguments opens
 * a new attempt and runs the function again; `deadLettered`: the attempt budget is spent.
 */
export class OperationFailedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'failed' }>;
  /** No later call will run the function (a final failure, or dead-lettered). */
  get final(): boolean {
    return this.outcome.final;
  }
  /** The attempt budget is spent: the operation is dead-lettered (an operator may redrive it). */
  get deadLettered(): boolean {
    return this.outcome.deadLettered;
  }
}

/**
 * `unknown`: the function may or may not have taken effect (a timeout, an abort, a lost
 * connection; or an earlier attempt did and there is no `reconcile`). Never a failure: retry
 * with the same arguments later; `reason` says why it is not known.
 */
export class OutcomeUnknownError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'unknown' }>;
  /** Why the outcome is not known (run()'s `UnknownReason`). */
  get reason(): UnknownReason {
    return this.outcome.reason;
  }
}

/** `fenced`: this call's attempt lost its lease while the function ran; another attempt owns the operation. */
export class AttemptFencedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'fenced' }>;
  /** Why the lease was lost. */
  get reason(): HeartbeatFenceReason {
    return this.outcome.reason;
  }
}

type SettleErrorClass = new (message: string, options: SettleErrorOptions) => SettleError;

/** Every registered SQLSTATE of the engine (class SE) and the class it maps to. */
export const errorClasses = {
  SE001: InvalidTenantError,
  SE002: InvalidKeyError,
  SE003: InvalidBindingError,
  SE004: InvalidRequestError,
  SE005: InvalidResultError,
  SE006: InvalidFailureError,
  SE007: InvalidLeaseError,
  SE008: InvalidArgumentError,
  SE010: OperationNotFoundError,
  SE011: NotDeadLetteredError,
  SE012: RedriveRequestMismatchError,
  SE013: TenantNotGrantedError,
  SE014: RetentionTooShortError,
  SE019: BindingScopeExceededError,
  SE040: FeedConsumerNotFoundError,
  SE041: FeedConsumerExistsError,
  SE042: FeedLeaseLostError,
  SE050: NotReconcilableError,
  SE051: ResolveLeaseHeldError,
  SE052: ResolveFingerprintMismatchError,
  SE053: ResolveEvidenceStaleError,
  SE060: BatchTooLargeError,
  SE061: BatchEmptyError,
  SE062: BatchShapeMismatchError,
  SE063: BatchNullElementError,
  SE064: BatchTooManyBytesError,
  SE020: ReservationLockImmutableError,
  SE021: StatusDowngradeError,
  SE022: ResultImmutableError,
  SE023: AuditLogAppendOnlyError,
  SE024: AttemptSettlementImmutableError,
  SE025: DeleteRefusedError,
  SE030: DatabaseEncodingError,
  SE031: CitusUnavailableError,
} as const satisfies Record<string, SettleErrorClass>;

/** Every SQLSTATE of class SE the engine raises (docs/errors.md). */
export type SettleSqlstate = keyof typeof errorClasses;

const RETRYABLE_SQLSTATES = new Set(['40001', '40P01', '55P03']);
const CONNECTION_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '25P03']);
const SOCKET_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);

interface PgErrorFields {
  code?: unknown;
  detail?: unknown;
  hint?: unknown;
  message?: unknown;
  cause?: unknown;
}

/** The first error in the cause chain that carries a `code` (pg's DatabaseError or a socket error). */
function findCoded(error: unknown): (PgErrorFields & { code: string }) | null {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth += 1) {
    const fields = current as PgErrorFields;
    if (typeof fields.code === 'string') return fields as PgErrorFields & { code: string };
    current = fields.cause;
  }
  return null;
}

function parseDetail(detail: unknown): Record<string, unknown> | null {
  if (typeof detail !== 'string' || detail === '') return null;
  try {
    const parsed: unknown = JSON.parse(detail);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)
      ? (parsed as Record<string, unknown>)
      : { value: parsed };
  } catch {
    return { text: detail };
  }
}

/**
 * Maps any error from slonik/pg to a typed error, by SQLSTATE (or socket error code, or slonik
 * error class) only, never by message text. Errors that are already SettleErrors, and errors that
 * are not database errors at all (bugs), are returned unchanged.
 */
export function mapDatabaseError(error: unknown): Error {
  if (error instanceof SettleError) return error;
  const coded = findCoded(error);
  const sqlstate = coded !== null && /^[0-9A-Z]{5}$/.test(coded.code) ? coded.code : null;
  const message = error instanceof Error ? error.message : String(error);
  const options = (code: string): SettleErrorOptions => ({
    code,
    sqlstate,
    detail: parseDetail(coded?.detail),
    hint: typeof coded?.hint === 'string' && coded.hint !== '' ? coded.hint : null,
    cause: error,
  });

  if (sqlstate !== null && Object.hasOwn(errorClasses, sqlstate)) {
    const ErrorClass: SettleErrorClass = errorClasses[sqlstate as SettleSqlstate];
    return new ErrorClass(message, options(sqlstate));
  }
  if (sqlstate !== null && RETRYABLE_SQLSTATES.has(sqlstate)) {
    return new SettleRetryableError(message, options(sqlstate));
  }
  if (sqlstate === '25006') return new SettleReadOnlyError(message, options(sqlstate));
  if (sqlstate === '57014' || error instanceof StatementTimeoutError || error instanceof StatementCancelledError) {
    return new SettleTimeoutError(message, options('57014'));
  }
  if (
    (sqlstate !== null && (sqlstate.startsWith('08') || CONNECTION_SQLSTATES.has(sqlstate))) ||
    (coded !== null && SOCKET_ERROR_CODES.has(coded.code)) ||
    error instanceof BackendTerminatedError ||
    error instanceof BackendTerminatedUnexpectedlyError ||
    error instanceof IdleTransactionTimeoutError ||
    error instanceof ConnectionError
  ) {
    return new SettleConnectionError(message, options(sqlstate ?? coded?.code ?? 'CONNECTION'));
  }
  if (sqlstate !== null) {
    return new SettleDatabaseError(message, options(sqlstate));
  }
  return error instanceof Error ? error : new Error(message, { cause: error });
}

/** True for errors a bounded retry may fix: serialization failure, deadlock, lock not available. */
export function isRetryable(error: unknown): boolean {
  return error instanceof SettleRetryableError;
}
