import { z } from 'zod';
import { apiError, type ApiError, type ConsoleDatabase } from './database.js';

// The console's actions, each one call of the SQL API the CLI uses (settle.resolve,
// settle.redrive, settle.expire_leases, settle.reset_consumer) under the operator's own database
// login, so the engine's audit trail and admin log record that login (session_user) as for the
// CLI. The engine refuses what the login may not do; the console only hides what it would refuse.

export interface ActionAnswer {
  readonly ok: boolean;
  readonly summary: string;
  readonly fields: readonly (readonly [string, unknown])[];
  readonly error: ApiError | null;
}

export interface ResolveRequest {
  readonly tenant: string;
  readonly key: string;
  readonly fingerprint: string;
  readonly outcome: 'completed' | 'failed';
  /** The result (completed) or the error (failed), as JSON text. */
  readonly payload: string;
  readonly reason: string;
  readonly evidence: string | null;
  /** The attempt epoch the operator looked at: a resolution of a later one is refused. */
  readonly expectedAttempt: number;
}

const resolveRow = z.object({
  outcome: z.string(),
  reason: z.string().nullable(),
  status: z.string(),
  status_before: z.string(),
  attempt: z.number(),
  settled_attempt: z.number().nullable(),
  result: z.unknown(),
  error: z.unknown(),
});

function refused(summary: string, error: unknown): ActionAnswer {
  return { ok: false, summary, fields: [], error: apiError(error) };
}

export async function resolveAction(db: ConsoleDatabase, r: ResolveRequest): Promise<ActionAnswer> {
  try {
    // expected_attempt is the precondition: a resolution of a page that shows an attempt the
    // operation has moved past is refused by settle.resolve itself (SE053).
    const [row] = await db.rows(
      resolveRow,
      `select * from settle.resolve(tenant => $1, key => $2, fingerprint => $3,
        expected_attempt => $4::integer, outcome => $5, reason => $6, result => $7::jsonb, error => $8::jsonb,
        evidence => $9::jsonb)`,
      [
        r.tenant,
        r.key,
        r.fingerprint,
        r.expectedAttempt,
        r.outcome,
        r.reason,
        r.outcome === 'completed' ? r.payload : null,
        r.outcome === 'failed' ? r.payload : null,
        r.evidence,
      ],
    );
    if (row === undefined) throw new Error('settle.resolve answered no row');
    return {
      ok: row.outcome === 'resolved',
      summary:
        row.outcome === 'resolved'
          ? `resolved: ${row.status_before} → ${row.status}`
          : `already final (${row.status}${row.reason === null ? '' : `, ${row.reason}`}): nothing changed`,
      fields: [
        ['outcome', row.outcome],
        ['status before', row.status_before],
        ['status', row.status],
        ['attempt', row.attempt],
        ['settled attempt', row.settled_attempt],
        ['result', row.result],
        ['error', row.error],
      ],
      error: null,
    };
  } catch (error) {
    return refused('resolve refused', error);
  }
}

export async function redriveAction(
  db: ConsoleDatabase,
  tenant: string,
  key: string,
  attempts: number,
  reason: string | null,
): Promise<ActionAnswer> {
  try {
    const [row] = await db.rows(
      z.object({ status: z.string(), attempt: z.number(), max_attempts: z.number(), redrive_count: z.number() }),
      `select status::text as status, attempt, max_attempts, redrive_count
         from settle.redrive(tenant => $1, key => $2, additional_attempts => $3, reason => $4)`,
      [tenant, key, attempts, reason],
    );
    if (row === undefined)
      return { ok: false, summary: 'redrive refused: operation not found', fields: [], error: null };
    return {
      ok: true,
      summary: `redriven: now ${row.status}`,
      fields: [
        ['status', row.status],
        ['attempt', row.attempt],
        ['max attempts', row.max_attempts],
        ['redrives', row.redrive_count],
      ],
      error: null,
    };
  } catch (error) {
    return refused('redrive refused', error);
  }
}

export async function expireLeasesAction(db: ConsoleDatabase): Promise<ActionAnswer> {
  try {
    const [row] = await db.rows(
      z.object({ expired: z.number(), dead_lettered: z.number() }),
      'select expired::int as expired, dead_lettered::int as dead_lettered from settle.expire_leases()',
    );
    return {
      ok: true,
      summary: `expired ${row?.expired ?? 0} lapsed leases`,
      fields: [
        ['expired', row?.expired],
        ['dead-lettered', row?.dead_lettered],
      ],
      error: null,
    };
  } catch (error) {
    return refused('expire leases refused', error);
  }
}

const resetRow = z.object({
  lane: z.number(),
  position_before: z.string(),
  position_after: z.string(),
  events_to_deliver: z.number(),
  applied: z.boolean(),
});
export type ResetRow = z.output<typeof resetRow>;

/** `to`: 'now' (skip the backlog), 'earliest' (every retained event) or an ISO time. */
export function resetTarget(to: string): string | null {
  return to === 'now' ? null : to === 'earliest' ? '-infinity' : to;
}

export async function resetConsumer(
  db: ConsoleDatabase,
  consumer: string,
  to: string,
  dryRun: boolean,
): Promise<{ rows: ResetRow[] } | { error: ApiError }> {
  try {
    const rows = await db.rows(
      resetRow,
      `select lane, position_before, position_after, events_to_deliver::int as events_to_deliver, applied
      from settle.reset_consumer(name => $1, to_time => $2::timestamptz, dry_run => $3)`,
      [consumer, resetTarget(to), dryRun],
    );
    return { rows };
  } catch (error) {
    return { error: apiError(error) };
  }
}
