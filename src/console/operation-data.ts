import { z } from 'zod';
import type { Capabilities } from './capabilities.js';
import type { ConsoleDatabase } from './database.js';

// One operation as the login may see it: its row of settle.operations (a tenant-bound login reads
// no row of another tenant: the page then says "not found", exactly as for a key that does not
// exist), its attempts, its audit trail and its feed events with the consumers that acknowledged
// them. Nothing here reads a lease token (no view shows one).

const date = z.date();
const json = z.unknown();

const operationRow = z.object({
  tenant: z.string(),
  key: z.string(),
  status: z.string(),
  status_rank: z.number(),
  attempt: z.number(),
  max_attempts: z.number(),
  in_flight: z.boolean(),
  lease_expires_at: date.nullable(),
  result: json,
  settled_attempt: z.number().nullable(),
  settled_at: date.nullable(),
  error: json,
  dead_lettered_at: date.nullable(),
  dead_letter_reason: z.string().nullable(),
  redrive_count: z.number(),
  fingerprint: z.string(),
  principal: z.string(),
  scopes: z.array(z.string()),
  binding_generation: z.string(),
  request: json,
  created_at: date,
  updated_at: date,
});
const attemptRow = z.object({
  attempt: z.number(),
  worker: z.string().nullable(),
  claimed_at: date,
  ended_at: date.nullable(),
  end_reason: z.string().nullable(),
  observation: z.string().nullable(),
  observed_at: date.nullable(),
  retryable: z.boolean().nullable(),
  error: json,
  late_result: json,
  settled: z.boolean(),
});
const auditRow = z.object({
  seq: z.string(),
  audit_id: z.string(),
  at: date,
  event: z.string(),
  outcome: z.string(),
  attempt: z.number().nullable(),
  status_before: z.string().nullable(),
  status_after: z.string().nullable(),
  actor: z.string().nullable(),
  login: z.string().nullable(),
  detail: json,
});
const feedRow = z.object({
  event_id: z.string(),
  position: z.string(),
  status: z.string(),
  status_before: z.string(),
  attempt: z.number(),
  occurred_at: date,
  acked_by: z.array(z.string()),
  pending_for: z.array(z.string()),
});

export type OperationRow = z.output<typeof operationRow>;
export type AttemptRow = z.output<typeof attemptRow>;
export type AuditRow = z.output<typeof auditRow>;
export type FeedEventRow = z.output<typeof feedRow>;

export interface OperationData {
  readonly now: Date;
  readonly operation: OperationRow;
  readonly attempts: readonly AttemptRow[];
  readonly audit: readonly AuditRow[] | null;
  readonly feed: readonly FeedEventRow[] | null;
  readonly statuses: readonly string[];
}

export async function readOperation(
  db: ConsoleDatabase,
  caps: Capabilities,
  tenant: string,
  key: string,
): Promise<OperationData | null> {
  if (!caps.read.operations) return null;
  const [operation] = await db.rows(
    operationRow,
    'select * from settle.operations o where o.tenant = $1 and o.key = $2',
    [tenant, key],
  );
  if (operation === undefined) return null;
  const [attempts, audit, feed, statuses] = await Promise.all([
    caps.read.attempts
      ? db.rows(attemptRow, 'select * from settle.attempts a where a.tenant = $1 and a.key = $2 order by a.attempt', [
          tenant,
          key,
        ])
      : [],
    caps.read.auditLog
      ? db.rows(
          auditRow,
          `select l.seq::text as seq, l.audit_id::text as audit_id, l.at, l.event, l.outcome, l.attempt, l.status_before::text as status_before,
                                  l.status_after::text as status_after, l.actor, l.login, l.detail
                             from settle.audit_log l where l.tenant = $1 and l.key = $2 order by l.seq, l.audit_id`,
          [tenant, key],
        )
      : null,
    caps.read.feedEvents
      ? db.rows(
          feedRow,
          `select e.event_id::text as event_id, e.position, e.status::text as status, e.status_before::text as status_before,
                                 e.attempt, e.occurred_at, e.acked_by, e.pending_for
                            from settle.feed_events e where e.tenant = $1 and e.key = $2 order by e.event_id`,
          [tenant, key],
        )
      : null,
    db.rows(z.object({ status: z.string() }), 'select unnest(enum_range(null::settle.status))::text as status'),
  ]);
  return { now: new Date(), operation, attempts, audit, feed, statuses: statuses.map((s) => s.status) };
}
