import type pg from 'pg';
import type { StatusName } from './history.js';

/** The database state the checker judges a history against, read as superuser. */
export interface FinalState {
  readonly operations: readonly OperationRow[];
  readonly attempts: readonly AttemptRow[];
  /** In (tenant, key, audit_id) order. */
  readonly audit: readonly AuditRow[];
}

export interface OperationRow {
  readonly tenant: string;
  readonly key: string;
  readonly status: StatusName;
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly leaseHeld: boolean;
  readonly request: unknown;
  readonly fingerprint: string;
  readonly principal: string;
  readonly scopes: readonly string[];
  readonly generation: string;
  readonly result: unknown;
  /** jsonb text of the result, as stored. */
  readonly resultText: string | null;
  readonly settledAttempt: number | null;
  readonly error: unknown;
  readonly deadLettered: boolean;
  readonly redriveCount: number;
}

export interface AttemptRow {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly observation: StatusName | null;
  readonly settled: boolean;
  readonly endReason: string | null;
  readonly error: unknown;
  readonly retryable: boolean | null;
  readonly lateResult: unknown;
}

export interface AuditRow {
  readonly tenant: string;
  readonly key: string;
  readonly auditId: string;
  readonly event: string;
  readonly outcome: string;
  readonly attempt: number | null;
  readonly statusBefore: StatusName | null;
  readonly statusAfter: StatusName | null;
  readonly detail: unknown;
  /**
   * An `expire` row whose lease (`lease_expires_at` in its detail) had not lapsed yet at the
   * row's time: the lease was taken from a live holder. False for every other row.
   */
  readonly endedLiveLease: boolean;
}

/**
 * Reads operations, attempts and the audit log of `tenants` (all tenants when omitted) from
 * the private tables. `client` must be a superuser (or settle_owner) connection.
 */
export async function readFinalState(client: pg.ClientBase, tenants?: readonly string[]): Promise<FinalState> {
  const filter = tenants === undefined ? 'true' : 'tenant = any($1::text[])';
  const params = tenants === undefined ? [] : [tenants];
  const operations = await client.query<OperationRow>(
    `select tenant, key, status::text as status, attempt, max_attempts as "maxAttempts",
            lease_token is not null as "leaseHeld", request, fingerprint, principal, scopes,
            binding_generation::text as generation, result, result::text as "resultText",
            settled_attempt as "settledAttempt", error, dead_lettered_at is not null as "deadLettered",
            redrive_count as "redriveCount"
       from settle_private.operations where ${filter} order by tenant, key`,
    params,
  );
  const attempts = await client.query<AttemptRow>(
    `select tenant, key, attempt, observation::text as observation, settled, end_reason as "endReason",
            error, retryable, late_result as "lateResult"
       from settle_private.attempts where ${filter} order by tenant, key, attempt`,
    params,
  );
  const audit = await client.query<AuditRow>(
    `select tenant, key, audit_id::text as "auditId", event, outcome, attempt,
            status_before::text as "statusBefore", status_after::text as "statusAfter", detail,
            case when event = 'expire' then coalesce((detail->>'lease_expires_at')::timestamptz > at, false)
                 else false end as "endedLiveLease"
       from settle_private.audit_log where ${filter} order by tenant, key, audit_id`,
    params,
  );
  return { operations: operations.rows, attempts: attempts.rows, audit: audit.rows };
}
