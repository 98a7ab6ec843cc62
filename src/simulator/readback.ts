import type pg from 'pg';
import type { AttemptRow, AuditRow, OperationRow } from './history.js';

/**
 * Reads back what the engine holds for one simulator run (tenants starting with the run's
 * prefix) through the read-only views of schema settle, in bulk.
 */
export interface EngineReadBack {
  readonly operations: OperationRow[];
  readonly attempts: AttemptRow[];
  readonly audit: AuditRow[];
}

export async function readBackEngine(pool: pg.Pool, tenantPrefix: string): Promise<EngineReadBack> {
  const [operations, attempts, audit] = await Promise.all([
    pool.query<{
      tenant: string;
      key: string;
      status: string;
      attempt: number;
      settled_attempt: number | null;
      result: unknown;
      request: unknown;
      binding_generation: string;
      in_flight: boolean;
      dead_lettered: boolean;
    }>(
      `select tenant, key, status::text, attempt, settled_attempt, result, request, binding_generation::text,
              in_flight, dead_lettered_at is not null as dead_lettered
         from settle.operations where starts_with(tenant, $1)`,
      [tenantPrefix],
    ),
    pool.query<{ tenant: string; key: string; attempt: number; observation: string | null; settled: boolean; end_reason: string | null }>(
      `select tenant, key, attempt, observation::text, settled, end_reason
         from settle.attempts where starts_with(tenant, $1)`,
      [tenantPrefix],
    ),
    pool.query<{
      tenant: string;
      key: string;
      audit_id: string;
      event: string;
      outcome: string;
      attempt: number | null;
      status_before: string | null;
      status_after: string | null;
    }>(
      `select tenant, key, audit_id::text, event, outcome, attempt, status_before::text, status_after::text
         from settle.audit_log where starts_with(tenant, $1)`,
      [tenantPrefix],
    ),
  ]);
  return {
    operations: operations.rows.map((r) => ({
      tenant: r.tenant,
      key: r.key,
      status: r.status,
      attempt: r.attempt,
      settledAttempt: r.settled_attempt,
      result: r.result,
      request: r.request,
      bindingGeneration: Number(r.binding_generation),
      inFlight: r.in_flight,
      deadLettered: r.dead_lettered,
    })),
    attempts: attempts.rows.map((r) => ({
      tenant: r.tenant,
      key: r.key,
      attempt: r.attempt,
      observation: r.observation,
      settled: r.settled,
      endReason: r.end_reason,
    })),
    audit: audit.rows.map((r) => ({
      tenant: r.tenant,
      key: r.key,
      auditId: BigInt(r.audit_id),
      event: r.event,
      outcome: r.outcome,
      attempt: r.attempt,
      statusBefore: r.status_before,
      statusAfter: r.status_after,
    })),
  };
}
