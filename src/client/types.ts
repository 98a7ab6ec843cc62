import type { DatabasePool, DatabasePoolConnection, DatabaseTransactionConnection } from 'slonik';
import type { Classification } from './classify.js';

/** A JSON value as stored in jsonb: finite numbers, plain objects and arrays only. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * `T` where every part is a JSON value: what run() and idempotent() accept from an effect when no
 * `result` schema is given (a Date, bigint, Map, Set, function or symbol anywhere in it makes the
 * call fail to compile, rather than fail at run time after the effect ran). Interfaces are
 * checked member by member, so they need no index signature. `undefined` (an absent optional
 * member, or no value at all) is allowed: it is not stored.
 */
export type JsonResult<T> = T extends Json | undefined | void
  ? T
  : T extends
        | Date
        | bigint
        | symbol
        | ((...args: never[]) => unknown)
        | ReadonlyMap<unknown, unknown>
        | ReadonlySet<unknown>
    ? never
    : T extends readonly (infer U)[]
      ? readonly JsonResult<U>[]
      : T extends object
        ? { [K in keyof T]: JsonResult<T[K]> }
        : never;

/**
 * Empty when `T` is JSON (JsonResult). Otherwise one required argument no call can pass, so
 * run() without a `result` schema does not compile; the compiler names it: return JSON from the
 * effect (an ISO string for a Date, a string for a bigint), or pass `result`.
 */
export type NotJsonWithoutSchema<T> = [T] extends [JsonResult<T>]
  ? []
  : [effectResultIsNotJson_returnJsonOrPassAResultSchema: never];

/** Canonical status, in lattice order: pending/running < unknown < conflict < failed < completed. */
export type Status = 'pending' | 'running' | 'unknown' | 'conflict' | 'failed' | 'completed';

/** The parts of a reservation lock a claim or settlement can disagree on. */
export type ConflictField = 'request' | 'binding';

/** A slonik pool, pool connection or transaction: any of them can run a client call. */
export type Queryable = DatabasePool | DatabasePoolConnection | DatabaseTransactionConnection;

/** Per-call options: run the call on your own connection or inside your own transaction. */
export interface CallOptions {
  /**
   * A slonik connection or transaction to run on. Inside a transaction a failed call is not
   * retried (the transaction is aborted): the error propagates so your transaction can retry.
   */
  readonly connection?: Queryable;
}

/** Authorization binding presented at claim and re-presented with every observation. */
export interface BindingInput {
  readonly principal: string;
  /** Order and duplicates are ignored by the engine. Default: no scopes. */
  readonly scopes?: readonly string[];
  /** Token epoch, session version or delegation revision: a non-negative safe integer or bigint. */
  readonly generation: number | bigint;
}

/** The binding as the client keeps it in an attempt handle. */
export interface Binding {
  readonly principal: string;
  readonly scopes: readonly string[];
  readonly generation: bigint;
}

/** An operation: its tenant (the keyspace) and its idempotency key. */
export interface OperationRef {
  readonly tenant: string;
  readonly key: string;
}

/** What claim() presents: the operation, the request it stands for, the caller's binding, and the lease and attempt budget to use. */
export interface ClaimInput extends OperationRef {
  /** The effect-defining fields; fingerprinted by the database at first claim (<= 64 KiB as jsonb text). */
  readonly request: Json;
  readonly binding: BindingInput;
  /** Lease length in milliseconds, 1 s to 1 day. Default 30 000. */
  readonly leaseMs?: number;
  /** Free-form worker name (<= 128 bytes) kept with the attempt and in the audit log. */
  readonly worker?: string;
  /** Attempt budget (1-1000), fixed at first claim. Default 5. */
  readonly maxAttempts?: number;
  /**
   * After an attempt reported unknown (and no lease is live): true (default) opens a new
   * attempt; false answers `in_doubt` and opens nothing, for a caller that cannot check whether
   * the effect happened (settle.claim's rerun_after_unknown, docs/protocol.md "In-doubt retries").
   */
  readonly rerunAfterUnknown?: boolean;
}

/**
 * Everything needed to renew and settle an attempt. The fingerprint comes from the database
 * (computed once at claim); the client never recomputes it.
 */
export interface AttemptHandle extends OperationRef {
  readonly attempt: number;
  readonly leaseToken: string;
  readonly leaseExpiresAt: Date;
  readonly fingerprint: string;
  readonly binding: Binding;
  /**
   * The request as claimed (set by claim()): run() presents it again, with the binding, in its
   * lock-gated re-read (settle.get). Observations do not need it.
   */
  readonly request?: Json;
}

/** What the lock-gated read presents: the operation and the reservation lock (request and binding). */
export interface GetInput extends OperationRef {
  readonly request: Json;
  readonly binding: BindingInput;
}

/**
 * Answer of the lock-gated read (settle.get). Only `found` discloses state; a `conflict` names
 * only the parts of the lock that differ; `refused` means the presented binding generation was
 * revoked (settle.revoke_binding).
 */
export type LockedRead =
  | (OperationState & {
      readonly outcome: 'found';
      /** `reauthenticated`: the same principal above a revocation floor reading its revoked operation. */
      readonly reason: 'reauthenticated' | null;
      readonly inFlight: boolean;
      /** When the reservation was made (its first claim), by the database clock. */
      readonly createdAt: Date;
    })
  | { readonly outcome: 'not_found' }
  | { readonly outcome: 'conflict'; readonly conflictOn: readonly ConflictField[] }
  | { readonly outcome: 'refused'; readonly reason: 'binding_revoked' };

/** The answer of claim(), by `outcome`: acquired (run the effect under the lease), in_progress, replay, conflict, failed, unknown, in_doubt, refused (see docs/sql-api.md, settle.claim). */
export type ClaimOutcome =
  | { readonly outcome: 'acquired'; readonly status: Status; readonly attempt: AttemptHandle }
  | {
      readonly outcome: 'in_progress';
      readonly status: Status;
      readonly attempt: number;
      readonly leaseExpiresAt: Date;
      readonly retryAfterMs: number;
    }
  | { readonly outcome: 'replay'; readonly result: Json; readonly settledAttempt: number; readonly attempt: number }
  | {
      readonly outcome: 'failed';
      readonly error: Json;
      readonly deadLettered: boolean;
      /** attempts_exhausted when dead-lettered (every attempt failed); null for a final failure. */
      readonly deadLetterReason: DeadLetterReason | null;
      readonly attempt: number;
    }
  /**
   * The attempt budget is spent and an attempt may have taken effect (it reported unknown,
   * conflicted, or its lease lapsed): dead-lettered, needs reconciliation. Do not run the effect.
   */
  | {
      readonly outcome: 'unknown';
      readonly status: Status;
      readonly attempt: number;
      readonly deadLettered: true;
      readonly deadLetterReason: 'needs_reconciliation';
    }
  /**
   * Only with `rerunAfterUnknown: false`: an attempt reported unknown, no lease is live and the
   * operation is not dead-lettered. Nothing was opened or changed; do not run the effect.
   */
  | { readonly outcome: 'in_doubt'; readonly status: 'unknown'; readonly attempt: number; readonly deadLettered: false }
  | { readonly outcome: 'conflict'; readonly conflictOn: readonly ConflictField[] }
  /** The presented binding generation is revoked (settle.revoke_binding): nothing disclosed, nothing run. */
  | { readonly outcome: 'refused'; readonly reason: 'binding_revoked' };

/** Why an operation is dead-lettered (docs/protocol.md): every attempt failed, or one may have taken effect. */
export type DeadLetterReason = 'attempts_exhausted' | 'needs_reconciliation';

/** Why an attempt is fenced; attempt_conflicted (it presented a mismatched lock) comes from observations only. */
export type HeartbeatFenceReason =
  | 'invalid_token'
  | 'superseded'
  | 'settled'
  | 'lease_released'
  | 'binding_revoked'
  | 'attempt_conflicted';

/** The answer of heartbeat(): extended (the lease runs on) or fenced (stop: the attempt no longer holds the lease). */
export type HeartbeatOutcome =
  | { readonly outcome: 'extended'; readonly status: Status; readonly leaseExpiresAt: Date }
  | { readonly outcome: 'fenced'; readonly reason: HeartbeatFenceReason; readonly status: Status | null };

/** An operation's state as the engine discloses it (a locked read, an observation's merge). */
export interface OperationState {
  readonly status: Status;
  /** The operation's current attempt epoch (may be later than the handle's). */
  readonly attempt: number;
  readonly settledAttempt: number | null;
  readonly result: Json | null;
  readonly error: Json | null;
  readonly deadLettered: boolean;
}

/** Canonical state after an observation merge (disclosed to a valid token whose lock matched). */
export interface CanonicalState extends OperationState {
  readonly deadLetterReason: DeadLetterReason | null;
}

/** Answer of complete / fail / reportUnknown: the outcome of merging one attempt's observation. */
export type Observation =
  | ({
      readonly outcome: 'settled';
      readonly reason:
        | 'current_attempt'
        | 'superseded_attempt'
        | 'lease_released'
        | 'final_failure'
        | 'attempts_exhausted';
    } & CanonicalState)
  | ({
      readonly outcome: 'recorded';
      readonly reason: 'retryable_failure' | 'outcome_unknown' | 'needs_reconciliation';
    } & CanonicalState)
  | ({ readonly outcome: 'duplicate'; readonly reason: null } & CanonicalState)
  | ({
      readonly outcome: 'already_settled';
      readonly reason: 'late_success' | 'attempt_already_observed';
    } & CanonicalState)
  | ({
      readonly outcome: 'fenced';
      readonly reason: 'superseded' | 'settled' | 'lease_released' | 'attempt_conflicted';
    } & CanonicalState)
  | { readonly outcome: 'fenced'; readonly reason: 'invalid_token' }
  /** The binding generation of this attempt is revoked: the observation is kept as evidence only. */
  | { readonly outcome: 'fenced'; readonly reason: 'binding_revoked' }
  | { readonly outcome: 'conflict'; readonly reason: 'lock_mismatch'; readonly conflictOn: readonly ConflictField[] };

/** One row of the settle.operations view: the canonical record. */
export interface OperationRecord extends OperationRef {
  readonly status: Status;
  readonly statusRank: number;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly inFlight: boolean;
  readonly leaseExpiresAt: Date | null;
  readonly result: Json | null;
  readonly settledAttempt: number | null;
  readonly settledAt: Date | null;
  readonly error: Json | null;
  readonly deadLetteredAt: Date | null;
  /** Why it is dead-lettered (null when it is not): attempts_exhausted or needs_reconciliation. */
  readonly deadLetterReason: DeadLetterReason | null;
  readonly redriveCount: number;
  readonly fingerprint: string;
  readonly principal: string;
  readonly scopes: readonly string[];
  readonly bindingGeneration: bigint;
  readonly request: Json;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** One attempt of an operation as settle.attempts shows it (inspect()). */
export interface AttemptRecord extends OperationRef {
  readonly attempt: number;
  readonly worker: string | null;
  readonly claimedAt: Date;
  readonly endedAt: Date | null;
  readonly endReason: 'observed' | 'lease_expired' | 'settled_elsewhere' | 'exhausted' | null;
  readonly observation: 'unknown' | 'conflict' | 'failed' | 'completed' | null;
  readonly observedAt: Date | null;
  readonly retryable: boolean | null;
  readonly error: Json | null;
  readonly lateResult: Json | null;
  readonly settled: boolean;
}

/** One row of the audit trail (settle.audit_log): what a call did to an operation. */
export interface AuditRecord extends OperationRef {
  readonly auditId: bigint;
  readonly at: Date;
  readonly event: string;
  readonly outcome: string;
  readonly attempt: number | null;
  readonly statusBefore: Status | null;
  readonly statusAfter: Status | null;
  readonly actor: string | null;
  readonly detail: Json | null;
}

/** A dead-lettered operation (settle.dead_letters): why, since when, and what was last stored. */
export interface DeadLetterRecord extends OperationRef {
  /** failed (reason attempts_exhausted), or unknown / conflict (reason needs_reconciliation). */
  readonly status: Status;
  /** attempts_exhausted: every attempt failed, redrive re-opens it; needs_reconciliation: an attempt may have taken effect, check the downstream first. */
  readonly reason: DeadLetterReason;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly error: Json | null;
  readonly deadLetteredAt: Date;
  readonly redriveCount: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** Per-tenant counts (int8 in SQL, so bigint here). */
export interface TenantStats {
  readonly tenant: string;
  readonly operations: bigint;
  readonly pending: bigint;
  readonly running: bigint;
  readonly unknown: bigint;
  readonly conflict: bigint;
  readonly failed: bigint;
  readonly completed: bigint;
  readonly deadLettered: bigint;
  readonly inFlight: bigint;
  readonly lapsedLeases: bigint;
  readonly attempts: bigint;
}

/** One row of settle.metrics (docs/observability.md): counts are int8 (bigint), ages in seconds. */
export interface SettleMetrics {
  readonly operationsInFlight: bigint;
  readonly lapsedLeases: bigint;
  readonly operationsUnknown: bigint;
  readonly oldestUnknownAgeSeconds: number;
  readonly operationsConflict: bigint;
  readonly deadLettersFailed: bigint;
  readonly deadLettersNeedsReconciliation: bigint;
  readonly oldestDeadLetterAgeSeconds: number;
  readonly conflictsRecent: bigint;
  readonly refusedObservationsRecent: bigint;
  readonly recentWindowSeconds: number;
  /**
   * Operations in doubt (unknown or conflict, not dead-lettered) by how long nobody touched them.
   * The dead_letter_in_doubt upkeep job dead-letters them for the reconciler once they pass
   * in_doubt_after (default 15 minutes; docs/client.md, "What the reconciler picks up").
   */
  readonly inDoubt: { readonly under5m: bigint; readonly from5mTo1h: bigint; readonly over1h: bigint };
}

/** What expireLeases() did in one call: leases ended and operations dead-lettered. */
export interface ExpireResult {
  readonly expired: number;
  readonly deadLettered: number;
}

/** A dead letter to re-open, with the extra attempts it gets. */
export interface RedriveInput extends OperationRef {
  /** Attempts added to the spent budget (1-1000). Default 1. */
  readonly additionalAttempts?: number;
  /** If given, must match the reservation (else RedriveRequestMismatchError). */
  readonly request?: Json;
  /** Kept in the audit row (<= 1024 bytes). */
  readonly reason?: string;
}

/** Called before each transparent retry of a transient database error. */
export interface RetryEvent {
  readonly operation: string;
  /** 1 for the first retry. */
  readonly retry: number;
  readonly delayMs: number;
  readonly error: Error;
}

/** How run() retries a retryable failure: attempts, backoff and its cap. */
export interface RetryPolicy {
  /** Retries after the first try (default 5). */
  readonly maxRetries?: number;
  /** First backoff ceiling in ms (default 20); doubles per retry, full jitter. */
  readonly baseDelayMs?: number;
  /** Backoff ceiling in ms (default 1000). */
  readonly maxDelayMs?: number;
}

/** A MeterProvider (from @opentelemetry/sdk-metrics or the API): typed loosely so the API stays optional. */
export interface MeterProviderLike {
  /** Returns the meter the client records its metrics with. */
  getMeter(name: string, version?: string, options?: object): unknown;
}
/** A TracerProvider (from @opentelemetry/sdk-trace-base or the API). */
export interface TracerProviderLike {
  /** Returns the tracer the client starts its spans with. */
  getTracer(name: string, version?: string, options?: object): unknown;
}

/** OpenTelemetry providers for the client's metrics and spans (default: the global ones; docs/observability.md). */
export interface TelemetryOptions {
  /** Default: the global MeterProvider of @opentelemetry/api, looked up at the client's first call. */
  readonly meterProvider?: MeterProviderLike;
  /** Default: the global TracerProvider of @opentelemetry/api. */
  readonly tracerProvider?: TracerProviderLike;
  /** Add `pg_settle.tenant` to metric and span attributes (default false: tenants may be many, or sensitive). */
  readonly tenantAttribute?: boolean;
}

interface CommonClientOptions {
  /** Transparent retries of 40001 / 40P01 / 55P03. */
  readonly retry?: RetryPolicy;
  readonly onRetry?: (event: RetryEvent) => void;
  /**
   * OpenTelemetry metrics and spans (docs/observability.md), through the optional peer
   * dependency @opentelemetry/api: the global providers by default, or the ones given here.
   * `false` turns them off. Without @opentelemetry/api installed nothing is recorded.
   */
  readonly telemetry?: TelemetryOptions | false;
}

/** Key routing on a Citus cluster (SettleClientOptions.citusRouting). */
export interface CitusRoutingOptions {
  /**
   * A connection string for each node the client may send calls to, by the node's name and port
   * as `pg_dist_node` lists them (`'10.0.0.5:5432'`). A key whose node is not listed goes through
   * `connectionString`, which delegates it. Each node gets its own pool of `poolSize`.
   */
  readonly nodes: Readonly<Record<string, string>>;
  /** How often the shard map is read again, in ms (default 60 000; it is also read again after a node could not be reached). */
  readonly refreshMs?: number;
  /**
   * Called when the shard map cannot be read (calls then go through `connectionString`) or a
   * node cannot be reached (that call goes through `connectionString`; the map is read again).
   */
  readonly onError?: (error: Error) => void;
}

/** Options of createSettleClient(): a connection string (the client owns its pool) or your own slonik pool, plus the client-wide settings. */
export type SettleClientOptions =
  | (CommonClientOptions & {
      readonly connectionString: string;
      /** Maximum pool size (default 10). */
      readonly poolSize?: number;
      /** Statement timeout in ms for the client's own pool (default 60 000). */
      readonly statementTimeoutMs?: number;
      /**
       * Run the client's own statements as named prepared statements (default true). Turn off
       * behind a connection pooler in transaction mode without prepared-statement support.
       */
      readonly preparedStatements?: boolean;
      /**
       * On Citus: send each keyed call (claim, heartbeat, complete, fail, reportUnknown, get,
       * inspect, attempts, auditLog, redrive, and so run()) straight to the node that holds the
       * key, where it runs without the hop through the node `connectionString` names
       * (docs/scale-out.md, "Routing keys to their node"). Calls inside a transaction you pass
       * in, and calls without a key, use `connectionString`.
       */
      readonly citusRouting?: CitusRoutingOptions;
    })
  | (CommonClientOptions & {
      /**
       * Your own slonik pool. The client validates rows itself if the pool lacks
       * settleInterceptors(); settleTypeParsers() are recommended but not required.
       * end() does not end a pool you passed in.
       */
      readonly pool: DatabasePool;
    });

// ---------------------------------------------------------------------------------------
// run() and runInTransaction()
// ---------------------------------------------------------------------------------------

export type { Classification } from './classify.js';

/** The input of run(): a claim plus run()'s own retry and classification settings. */
export interface RunInput extends ClaimInput {
  /**
   * How long, in total, to wait for an in-flight attempt of another worker before answering
   * `in_progress` (default 5000 ms; 0: do not wait).
   */
  readonly waitForMs?: number;
  /**
   * Longest pause between two claims while waiting (default 50 ms; 1-5000). The pauses start at
   * 5 ms and double up to this, so a waiter sees a completion within about this long of its commit.
   */
  readonly pollIntervalMs?: number;
  /**
   * What a thrown error means (default defaultClassify: aborts, timeouts and connections lost
   * mid-request are `unknown`, every other error is `retryable`).
   */
  readonly classify?: (error: unknown) => Classification;
  /** Turns a thrown error into the JSON stored with the failure (default: name, message, code). */
  readonly errorToJson?: (error: unknown) => Json;
  /** How often the lease is renewed while the effect runs (default leaseMs / 3). */
  readonly heartbeatIntervalMs?: number;
}

/** A schema for the effect's result: any zod schema (or Standard Schema) whose output is T. */
export interface ResultSchema<T> {
  readonly '~standard': {
    /** Standard Schema's validation: the value typed as T, or the issues. */
    readonly validate: (
      value: unknown,
    ) =>
      | { readonly value: T; readonly issues?: undefined }
      | { readonly issues: readonly { readonly message: string; readonly path?: readonly unknown[] | undefined }[] }
      | Promise<unknown>;
  };
}

/** Options of run() and runInTransaction(). */
export interface RunOptions<T = unknown> extends CallOptions {
  /**
   * Stops waiting for another worker's attempt (run() then rejects with the signal's reason) and,
   * while the effect runs, aborts the context's `signal` too (the effect's abort is then an
   * `unknown`: it may have happened).
   */
  readonly signal?: AbortSignal;
  /** Validates the result on completed and on replay: `outcome.result` is then typed `T`. */
  readonly result?: ResultSchema<T>;
  /**
   * Called before the effect when an earlier attempt may already have taken effect (it reported
   * unknown, or lost its lease): look the effect up downstream (e.g. the charge by its
   * idempotency key). A result settles the operation without running the effect; `undefined`
   * runs the effect. If it throws, the attempt is reported unknown and run() answers `unknown`.
   */
  readonly reconcile?: (context: RunContext) => Promise<T | undefined>;
  /**
   * After an earlier attempt reported unknown, run the effect again although no `reconcile` is
   * given (default false: run() answers `unknown`, reason `needs_reconciliation`, and runs
   * nothing). Only for effects whose downstream honours one idempotency key for every attempt.
   */
  readonly rerunAfterUnknown?: boolean;
}

/** What run() knows about the attempts before this one, from the engine's claim answer. */
export interface EarlierAttempts {
  /** Attempts opened before this one (this attempt's number - 1). */
  readonly count: number;
  /**
   * An earlier attempt reported unknown (the operation's status was `unknown` when this attempt
   * was acquired): its effect may have happened.
   */
  readonly reportedUnknown: boolean;
  /**
   * Whether an earlier attempt may have run the effect: true whenever one exists, because the
   * application role is not told whether an earlier attempt failed definitively or lost its lease.
   */
  readonly mayHaveTakenEffect: boolean;
}

/** What run() passes to the effect: the attempt handle, its number, earlier attempts, an AbortSignal that fires when the lease is lost, and a manual heartbeat. */
export interface RunContext {
  readonly attempt: AttemptHandle;
  /** This attempt's number (1 for the first). */
  readonly attemptNumber: number;
  /** What the earlier attempts reported. */
  readonly earlier: EarlierAttempts;
  /** Aborted the moment the lease is known lost (fenced heartbeat, or no renewal before expiry), or the caller's signal aborts. */
  readonly signal: AbortSignal;
  /** Renew the lease now (the timer does it too); aborts `signal` when fenced. */
  heartbeat(): Promise<HeartbeatOutcome>;
}

/** Why run() answered `unknown`. */
export type UnknownReason =
  /** The settle call itself (complete, fail) timed out or lost its connection. */
  | 'settle_call_failed'
  /** The effect threw an error classified `unknown` (timeout, abort, connection lost mid-request). */
  | 'effect_outcome_unknown'
  /** An earlier attempt reported unknown and there is no `reconcile` (nor `rerunAfterUnknown`): nothing ran. */
  | 'needs_reconciliation'
  /** `reconcile` threw: nothing ran, the earlier attempt's outcome is still unknown. */
  | 'reconcile_failed'
  /** The re-read after an ambiguous settle call shows a completed record whose lineage is not this reservation's. */
  | 'lineage_unproven';

/** A void effect's result is stored as null. */
export type VoidToNull<T> = [T] extends [void] ? null : T;

/** The answer of run() and runInTransaction(), a union discriminated by `outcome` (docs/client.md lists each). */
export type RunOutcome<T = Json> =
  /**
   * The effect's result is the settlement (this_attempt), or another attempt's is
   * (other_attempt). `reconciled`: the result came from `reconcile`, the effect did not run.
   */
  | {
      readonly outcome: 'completed';
      readonly result: T;
      readonly attempt: number;
      readonly settledBy: 'this_attempt' | 'other_attempt';
      readonly reconciled?: true;
    }
  /** Already completed before this call: the stored result, the effect did not run. */
  | { readonly outcome: 'replay'; readonly result: T; readonly settledAttempt: number }
  | { readonly outcome: 'conflict'; readonly conflictOn: readonly ConflictField[] }
  /** The binding generation presented is revoked (settle.revoke_binding): re-authenticate; nothing ran. */
  | { readonly outcome: 'refused'; readonly reason: 'binding_revoked' }
  /**
   * final: no later attempt will run (final failure or dead letter); otherwise a later run()
   * with the same key opens a new attempt. `cause` is what the effect threw, if it ran here.
   */
  | {
      readonly outcome: 'failed';
      readonly error: Json;
      readonly final: boolean;
      readonly deadLettered: boolean;
      readonly attempt: number;
      readonly cause?: unknown;
    }
  /** Another worker still holds the lease after waitForMs. */
  | {
      readonly outcome: 'in_progress';
      readonly attempt: number;
      readonly leaseExpiresAt: Date;
      readonly retryAfterMs: number;
    }
  /** This attempt lost its lease; its failure was not recorded (another attempt owns the operation). */
  | {
      readonly outcome: 'fenced';
      readonly reason: HeartbeatFenceReason;
      readonly attempt: number;
      readonly cause?: unknown;
    }
  /**
   * The effect may or may not have happened (`reason` says why this is not known). Never a
   * failure: retry with the same key; the next run() reconciles first. `record` is a best-effort
   * lock-gated re-read (settle.get; null when none was made or it failed).
   */
  | {
      readonly outcome: 'unknown';
      readonly reason: UnknownReason;
      readonly attempt: number;
      readonly record: LockedRead | null;
      readonly cause: Error;
    };

// settle.idempotent() (src/client/idempotent.ts)

/** A value given once, or derived from each call's arguments. */
export type PerCall<A extends readonly unknown[], V> = V | ((...args: A) => V);

/**
 * Options of `settle.idempotent(fn, options)`: how each call's operation is derived from its
 * arguments, plus run()'s settings (`leaseMs`, `maxAttempts`, `waitForMs`, `classify`, ...) and
 * options (`result`, `reconcile`, `rerunAfterUnknown`).
 */
export interface IdempotentOptions<A extends readonly unknown[], R>
  extends Omit<RunInput, 'tenant' | 'key' | 'request' | 'binding'> {
  /** The tenant (keyspace): a string, or derived from the call's arguments. */
  readonly tenant: PerCall<A, string>;
  /** The idempotency key of a call, derived from its arguments (e.g. `(order) => order.id`). */
  readonly key: (...args: A) => string;
  /**
   * The effect-defining part of the arguments, fingerprinted at the first call: a later call
   * under the same key with a different request throws `IdempotencyConflictError`
   * (`conflictOn: ['request']`) and runs nothing. Required on purpose: what belongs in it (the
   * amount, the recipient) and what does not (a logger, a trace id) only you know.
   */
  readonly request: (...args: A) => Json;
  /** Who may settle under the key: a fixed binding (a service identity), or derived per call. */
  readonly binding: PerCall<A, BindingInput>;
  /**
   * A zod schema (any Standard Schema) for the result: the function's value is checked before it
   * is stored, and a replayed result before it is returned (typed `R`; a stored result that no
   * longer matches throws `StoredResultMismatchError`, never a wrongly typed value).
   */
  readonly result?: ResultSchema<R>;
  /**
   * Called before `fn` when an earlier attempt may already have taken effect (run()'s
   * `reconcile`), with the call's arguments: a value settles the call with it and `fn` does not
   * run; `undefined` runs `fn`.
   */
  readonly reconcile?: (context: RunContext, ...args: A) => Promise<R | undefined>;
  /** run()'s `rerunAfterUnknown`: run `fn` again after an earlier attempt reported unknown. */
  readonly rerunAfterUnknown?: boolean;
}

/** Isolation level of runInTransaction()'s transaction. */
export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

/** The input of runInTransaction(): a run() input plus the transaction's isolation level. */
export interface TransactionRunInput extends RunInput {
  /** Isolation level of the transaction the client opens (ignored inside your own transaction). */
  readonly isolation?: Isolation;
}

/** What runInTransaction() passes to the effect: the slonik transaction the settlement commits in, and the attempt. */
export interface TransactionEffectContext {
  /** Run your SQL here: it commits together with the settlement, or not at all. */
  readonly transaction: DatabaseTransactionConnection;
  readonly attempt: AttemptHandle;
}

/** Same outcomes as run(); `in_progress` means another worker's lease (run()) is live. */
export type TransactionOutcome = RunOutcome;

// ---------------------------------------------------------------------------------------------
// Batches (client.claimMany, completeMany, runMany, idempotentMany: src/client/run-many.ts)
// ---------------------------------------------------------------------------------------------

/** One key of a batch and the request it stands for. */
export interface BatchItem {
  readonly key: string;
  readonly request: Json;
}

/** claimMany's input: one tenant and one binding for every item (settle.claim_many). */
export interface ClaimManyInput {
  readonly tenant: string;
  readonly binding: BindingInput;
  /** 1 to LIMITS.maxBatchKeys items; a key may repeat (the repeat is answered as a second caller). */
  readonly items: readonly BatchItem[];
  readonly leaseMs?: number;
  readonly worker?: string;
  readonly maxAttempts?: number;
  readonly rerunAfterUnknown?: boolean;
}

/** runMany's input: run()'s settings, shared by every item, and the items. */
export interface RunManyInput
  extends Omit<RunInput, 'key' | 'request' | 'waitForMs' | 'pollIntervalMs' | 'rerunAfterUnknown'> {
  readonly items: readonly BatchItem[];
}

/** An item runMany acquired: its place in the input, its request and its attempt. */
export interface AcquiredItem {
  /** Position of the item in `input.items` (0-based). */
  readonly index: number;
  readonly key: string;
  readonly request: Json;
  readonly attempt: AttemptHandle;
  /** What earlier attempts of this key did (as run()'s context.earlier). */
  readonly earlier: EarlierAttempts;
}

/** What the effect reports per acquired item, in the order of `context.items`: Promise.allSettled's shape. */
export type ItemReport<T> = PromiseSettledResult<T>;

/** The effect's view of a batch. */
export interface RunManyContext {
  /** Every item acquired by this call, in input order. */
  readonly items: readonly AcquiredItem[];
  /** Aborted when the caller's signal aborts or any item's lease is lost (LeaseLostError). */
  readonly signal: AbortSignal;
  /** Renew every item's lease now (it is renewed every heartbeatIntervalMs anyway). */
  heartbeat(): Promise<void>;
}

export interface RunManyOptions<T = unknown> extends CallOptions {
  readonly signal?: AbortSignal;
  /** Validates each item's result before it is stored, and every replayed result. */
  readonly result?: ResultSchema<T>;
  /**
   * Open a new attempt for an item whose earlier attempt reported unknown (the effect is safe to
   * repeat, or the downstream honours one idempotency key for every attempt). Default false: such
   * an item answers unknown / needs_reconciliation and is not given to the effect.
   */
  readonly rerunAfterUnknown?: boolean;
}

/**
 * Options of `settle.idempotentMany(fn, options)`: one tenant and binding for the batch, how each
 * item's key and request are derived, plus runMany()'s settings and options.
 */
export interface IdempotentManyOptions<A, R>
  extends Omit<RunManyInput, 'items'>,
    Omit<RunManyOptions<R>, keyof CallOptions | 'signal'> {
  /** The idempotency key of an item (e.g. `(order) => order.id`). */
  readonly key: (item: A) => string;
  /** The effect-defining part of an item, fingerprinted at its first call (see IdempotentOptions.request). */
  readonly request: (item: A) => Json;
}

// ---------------------------------------------------------------------------------------
// The client
// ---------------------------------------------------------------------------------------

/** The pg-settle client: run(), runInTransaction(), the low-level calls (claim, heartbeat, complete, fail, reportUnknown, get) and the operator calls. Create it with createSettleClient(). */
export interface SettleClient {
  /** The slonik pool the client runs on (yours, or the one it created on first use). */
  getPool(): Promise<DatabasePool>;

  /**
   * Consume the settlement feed as the registered consumer `name` (docs/feed.md) until
   * options.signal aborts: batches of final outcomes, read and acknowledged in one transaction
   * with the handler (mode transaction, the default: exactly once for effects written through
   * context.connection) or around it (mode external: at least once, deduplicate by eventId).
   */
  consume(
    name: string,
    handler: FeedHandler<'transaction'>,
    options?: ConsumeOptions & { readonly mode?: 'transaction' } & ListenOption,
  ): Promise<ConsumeSummary>;
  /** External mode: the handler's context.connection is null (at least once; deduplicate by eventId). */
  consume(
    name: string,
    handler: FeedHandler<'external'>,
    options: ConsumeOptions & { readonly mode: 'external' } & ListenOption,
  ): Promise<ConsumeSummary>;
  /** A mode known only at run time: context.connection may be null. */
  consume(name: string, handler: FeedHandler, options?: ConsumeOptions & ListenOption): Promise<ConsumeSummary>;

  /** Reserve (tenant, key) on first call, or join it. Never throws for an outcome. */
  claim(input: ClaimInput, options?: CallOptions): Promise<ClaimOutcome>;
  /** Extend the lease of the attempt (default 30 s from now, by the database clock). */
  heartbeat(handle: AttemptHandle, options?: CallOptions & { readonly leaseMs?: number }): Promise<HeartbeatOutcome>;
  /** This attempt's effect committed with `result`: the binding-gated success merge. */
  complete(handle: AttemptHandle, result: Json, options?: CallOptions): Promise<Observation>;
  /** This attempt's effect definitely did not happen (retryable: default true). */
  fail(
    handle: AttemptHandle,
    error: Json,
    options?: CallOptions & { readonly retryable?: boolean },
  ): Promise<Observation>;
  /** This attempt lost the response of its effect: unknown, never failure. */
  reportUnknown(handle: AttemptHandle, options?: CallOptions): Promise<Observation>;
  /**
   * The lock-gated read (settle.get): the canonical state for the holder of the reservation lock
   * (same request and binding as the claim). Never throws for an outcome.
   */
  get(input: GetInput, options?: CallOptions): Promise<LockedRead>;
  /** The whole canonical record, or null (settle.inspect: settle_readonly or settle_admin). */
  inspect(ref: OperationRef, options?: CallOptions): Promise<OperationRecord | null>;

  /** Run an effect exactly once per (tenant, key): claim, heartbeat, settle (see docs/client.md). */
  run<T>(
    input: RunInput,
    effect: (context: RunContext) => Promise<T>,
    options: RunOptions<T> & { readonly result: ResultSchema<T> },
  ): Promise<RunOutcome<VoidToNull<T>>>;
  /** Without a `result` schema the effect's value must be JSON (JsonResult): a Date or bigint does not compile. */
  run<T = Json>(
    input: RunInput,
    effect: (context: RunContext) => Promise<T>,
    options?: RunOptions<T>,
    ...notJson: NotJsonWithoutSchema<T>
  ): Promise<RunOutcome<VoidToNull<T>>>;
  /**
   * Wrap an async function once and call it as before: each call runs through run() under the
   * key, request, tenant and binding derived from its arguments. A completed call's result is
   * returned (a replay without calling `fn`); every other outcome is thrown as an
   * `IdempotentCallError` subclass (see docs/client.md, "idempotent()"). The parameter types come
   * from `fn` alone (the option functions are checked against them); the result type is the
   * `result` schema's output if given, else what `fn` resolves to.
   * @typeParam F - The wrapped function's type: the wrapper has its parameters.
   * @typeParam R - What the wrapper resolves with: the `result` schema's output, else what `fn` resolves to.
   */
  idempotent<F extends (...args: any[]) => Promise<R>, R = Awaited<ReturnType<F>>>(
    fn: F,
    options: IdempotentOptions<Parameters<F>, R>,
  ): (...args: Parameters<F>) => Promise<R>;
  /** Claim many keys of one tenant in one round trip (settle.claim_many): one outcome per item, in order. */
  claimMany(input: ClaimManyInput, options?: CallOptions): Promise<ClaimOutcome[]>;
  /** Complete many attempts of one tenant and binding in one round trip (settle.complete_many): one observation per handle. */
  completeMany(
    handles: readonly AttemptHandle[],
    results: readonly Json[],
    options?: CallOptions,
  ): Promise<Observation[]>;
  /**
   * run() for many keys of one tenant: one claim call, one effect that receives every acquired
   * item and reports per item (Promise.allSettled's shape), one complete call; one RunOutcome per
   * input item, in order (docs/client.md, "runMany()").
   */
  runMany<T = Json>(
    input: RunManyInput,
    effect: (context: RunManyContext) => Promise<readonly ItemReport<T>[]>,
    options?: RunManyOptions<T>,
  ): Promise<RunOutcome<VoidToNull<T>>[]>;
  /**
   * idempotent() for arrays: wrap `fn(items)` once; each call runs the items through runMany()
   * and answers one settled result per item (fulfilled: the result, a replay included; rejected:
   * the IdempotentCallError subclass of its outcome). `fn` gets only the items that must run.
   */
  idempotentMany<A, R>(
    fn: (items: readonly A[], context: RunManyContext) => Promise<readonly ItemReport<R>[]>,
    options: IdempotentManyOptions<A, R>,
  ): (items: readonly A[]) => Promise<PromiseSettledResult<R>[]>;
  /** Claim, run your SQL and complete in one transaction: effect and settlement commit together. */
  runInTransaction<T extends Json>(
    input: TransactionRunInput,
    effect: (context: TransactionEffectContext) => Promise<T>,
    options?: RunOptions,
  ): Promise<TransactionOutcome>;

  /** Admin: end lapsed leases and dead-letter spent operations (settle_admin). */
  expireLeases(input?: { readonly batchSize?: number }, options?: CallOptions): Promise<ExpireResult>;
  /** Admin: re-open a dead-lettered operation (settle_admin). */
  redrive(input: RedriveInput, options?: CallOptions): Promise<OperationRecord>;
  /** Admin: delete terminal operations older than olderThanMs; returns how many (settle_admin). */
  purge(input: { readonly olderThanMs: number; readonly batchSize?: number }, options?: CallOptions): Promise<number>;
  /** Per-tenant counts (settle_readonly or settle_admin). Scans every operation. */
  stats(options?: CallOptions): Promise<TenantStats[]>;
  /** The settle.metrics gauges, from partial indexes: cheap at any size (settle_readonly or settle_admin). */
  metrics(options?: CallOptions): Promise<SettleMetrics>;
  /** Dead-lettered operations, oldest first (settle_readonly or settle_admin). */
  deadLetters(input?: { readonly limit?: number }, options?: CallOptions): Promise<DeadLetterRecord[]>;
  /** Every attempt of one operation (settle_readonly or settle_admin). */
  attempts(ref: OperationRef, options?: CallOptions): Promise<AttemptRecord[]>;
  /** The audit trail of one operation (settle_readonly or settle_admin). */
  auditLog(ref: OperationRef, options?: CallOptions): Promise<AuditRecord[]>;

  /** Ends the pool if the client created it; a pool you passed in stays open. */
  end(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// The settlement feed (client.consume, src/client/feed.ts, docs/feed.md)
// ---------------------------------------------------------------------------------------------

/** One final outcome of an operation, as the feed delivers it. */
export interface FeedEvent {
  /** The delivery id: unique and stable across re-deliveries. Use it as the downstream idempotency key. */
  readonly eventId: bigint;
  /** The event's position_xid (xid8, as text): with eventId, its place in the feed. */
  readonly position: string;
  readonly consumer: string;
  readonly lane: number;
  readonly leaseToken: string;
  readonly leaseExpiresAt: Date;
  readonly tenant: string;
  readonly key: string;
  readonly status: 'completed' | 'failed';
  /** running/pending normally; unknown or conflict: a reconciliation was resolved; failed: a late success. */
  readonly statusBefore: Status;
  /** completed: the settled attempt; failed: the attempt epoch. */
  readonly attempt: number;
  readonly result: Json | null;
  readonly error: Json | null;
  readonly deadLetterReason: string | null;
  readonly redriveCount: number;
  /** When the outcome was written (not when it committed). */
  readonly occurredAt: Date;
}

/** What consume() passes to the handler with each batch: the consumer, its lane, the transaction (transaction mode) and a signal that fires on stop. */
/** How consume() delivers: `transaction` (exactly once for effects in this database) or `external` (at least once). */
export type FeedMode = 'transaction' | 'external';

/** The option of consume() for the NOTIFY listener. */
export interface ListenOption {
  /** For the NOTIFY listener when the client was created over your own pool. */
  readonly listenConnectionString?: string;
}

/** What a feed handler receives with each batch: the consumer and lane, the transaction (by mode), the stop signal. */
export interface FeedBatchContext<M extends FeedMode = FeedMode> {
  readonly consumer: string;
  readonly lane: number;
  /** transaction mode: the transaction that reads and acknowledges the batch; write your effect through it. null in external mode. */
  readonly connection: M extends 'external' ? null : DatabaseTransactionConnection;
  /** Aborted when consume() is asked to stop (the batch may still finish). */
  readonly signal: AbortSignal;
  /** On a Citus cluster (citusRouting): the node ("host:port") whose feed the batch came from. */
  readonly node?: string;
}

/** A feed consumer's handler: called with each batch of settlement events, in order; the batch is acknowledged when it resolves. */
export type FeedHandler<M extends FeedMode = FeedMode> = (
  events: readonly FeedEvent[],
  context: FeedBatchContext<M>,
) => Promise<void>;

/** Options of consume(): batch size, delivery mode and pacing (docs/feed.md). */
export interface ConsumeOptions {
  /** Events per batch, 1-100 000. Default 100. */
  readonly batchSize?: number;
  /** `transaction` (default): exactly once for effects in this database. `external`: at least once. */
  readonly mode?: 'transaction' | 'external';
  /** Stop after the batch in flight when aborted; consume() then resolves. */
  readonly signal?: AbortSignal;
  /** Lease of a lane in external mode (1 s - 1 day). Default 30 000 ms: keep it above a batch's time. */
  readonly leaseMs?: number;
  /** First wait after an empty read, doubled up to maxIdleMs. Default 100 ms. */
  readonly idleMs?: number;
  /** Longest wait between polls when the feed is idle. Default 2 000 ms. */
  readonly maxIdleMs?: number;
  /** Wait after a failed batch, doubled per consecutive failure up to 30 s. Default 200 ms. */
  readonly errorBackoffMs?: number;
  /** Listen for NOTIFY settle_feed on a dedicated connection (default: true when the client has a connectionString). */
  readonly wake?: boolean;
  /** Sees every error (handler or database); consume() keeps going. Default: none. */
  readonly onError?: (error: Error) => void;
  /** After every acknowledged batch. */
  readonly onBatch?: (events: readonly FeedEvent[]) => void;
}

/** What consume() did until it stopped: batches and events handled, handler errors. */
export interface ConsumeSummary {
  readonly batches: number;
  readonly events: number;
  readonly errors: number;
}
