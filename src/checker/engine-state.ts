import type pg from 'pg';
import type { Status } from '../client/types.js';

/**
 * The one read-back of what the engine holds, for every history checker (the simulator's and
 * the reliability suite's): operations, attempts and the audit trail, read through the public
 * read-only views of schema settle (settle_readonly can read them), in (tenant, key, ...) order.
 */
export interface EngineState {
  readonly operations: readonly OperationRow[];
  readonly attempts: readonly AttemptRow[];
  /** In (tenant, key, seq, audit_id) order. */
  readonly audit: readonly AuditRow[];
}

/** One row of settle.operations. */
export interface OperationRow {
  readonly tenant: string;
  readonly key: string;
  readonly status: Status;
  readonly attempt: number;
  readonly maxAttempts: number;
  /** A lease is held (expired or not): lease_expires_at is set exactly when a lease token is. */
  readonly leaseHeld: boolean;
  /** A lease is held and has not lapsed by the database clock (the view's in_flight). */
  readonly inFlight: boolean;
  readonly request: unknown;
  readonly fingerprint: string;
  readonly principal: string;
  readonly scopes: readonly string[];
  /** binding_generation as decimal text, so bigint and number generations compare alike. */
  readonly generation: string;
  readonly result: unknown;
  /** jsonb text of the result, as stored. */
  readonly resultText: string | null;
  readonly settledAttempt: number | null;
  readonly error: unknown;
  readonly deadLettered: boolean;
  readonly redriveCount: number;
}

/** One row of settle.attempts. */
export interface AttemptRow {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly observation: Status | null;
  readonly settled: boolean;
  readonly endReason: string | null;
  readonly error: unknown;
  readonly retryable: boolean | null;
  readonly lateResult: unknown;
}

/** One row of settle.audit_log. */
export interface AuditRow {
  readonly tenant: string;
  readonly key: string;
  /** audit_id as decimal text (bigint). */
  readonly auditId: string;
  readonly event: string;
  readonly outcome: string;
  readonly attempt: number | null;
  readonly statusBefore: Status | null;
  readonly statusAfter: Status | null;
  readonly detail: unknown;
  /** Who: what the caller supplied (a claim's worker) or the login (session_user) of an admin call such as resolve. */
  readonly actor?: string | null;
  /**
   * An `expire` row whose lease (`lease_expires_at` in its detail) had not lapsed yet at the
   * row's time: the lease was taken from a live holder. False for every other row.
   */
  readonly endedLiveLease: boolean;
}

/** Which tenants to read: a list, every tenant starting with a prefix, or (neither) all. */
export interface EngineStateFilter {
  readonly tenants?: readonly string[];
  readonly tenantPrefix?: string;
}

/** Reads the engine state of the tenants `filter` names. */
export async function readEngineState(
  db: pg.ClientBase | pg.Pool,
  filter: EngineStateFilter = {},
): Promise<EngineState> {
  const [where, params] =
    filter.tenants !== undefined
      ? ['tenant = any($1::text[])', [filter.tenants]]
      : filter.tenantPrefix !== undefined
        ? ['starts_with(tenant, $1)', [filter.tenantPrefix]]
        : ['true', []];
  const operations = await db.query<OperationRow>(
    `select tenant, key, status::text as status, attempt, max_attempts as "maxAttempts",
            lease_expires_at is not null as "leaseHeld", in_flight as "inFlight", request, fingerprint,
            principal, scopes, binding_generation::text as generation, result, result::text as "resultText",
            settled_attempt as "settledAttempt", error, dead_lettered_at is not null as "deadLettered",
            redrive_count as "redriveCount"
       from settle.operations where ${where} order by tenant, key`,
    params,
  );
  const attempts = await db.query<AttemptRow>(
    `select tenant, key, attempt, observation::text as observation, settled, end_reason as "endReason",
            error, retryable, late_result as "lateResult"
       from settle.attempts where ${where} order by tenant, key, attempt`,
    params,
  );
  const audit = await db.query<AuditRow>(
    `select tenant, key, audit_id::text as "auditId", event, outcome, attempt,
            status_before::text as "statusBefore", status_after::text as "statusAfter", detail, actor,
            case when event = 'expire' then coalesce((detail->>'lease_expires_at')::timestamptz > at, false)
                 else false end as "endedLiveLease"
       from settle.audit_log where ${where} order by tenant, key, seq, audit_id`,
    params,
  );
  return { operations: operations.rows, attempts: attempts.rows, audit: audit.rows };
}
