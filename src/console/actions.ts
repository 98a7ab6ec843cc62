import { z } from 'zod';
import type { Capabilities } from './capabilities.js';
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

/** The console's own refusal of a stale resolution, where settle.resolve has no expected_attempt. */
export const STALE_SQLSTATE = 'SE053';

export class StalePageError extends Error {
  readonly code = STALE_SQLSTATE;
  constructor(message: string, readonly detail: string, readonly hint: string) {
    super(message);
  }
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
  outcome: z.string(), reason: z.string().nullable(), status: z.string(), status_before: z.string(), attempt: z.number(),
  settled_attempt: z.number().nullable(), result: z.unknown(), error: z.unknown(),
});

function refused(summary: string, error: unknown): ActionAnswer {
  return { ok: false, summary, fields: [], error: apiError(error) };
}

export async function resolveAction(db: ConsoleDatabase, caps: Capabilities, r: ResolveRequest): Promise<ActionAnswer> {
  const args = [r.tenant, r.key, r.fingerprint, r.outcome, r.reason,
    r.outcome === 'completed' ? r.payload : null, r.outcome === 'failed' ? r.payload : null, r.evidence];
  const call = (withExpected: boolean) => `select * from settle.resolve(tenant => $1, key => $2, fingerprint => $3, outcome => $4, reason => $5,
      result => $6::jsonb, error => $7::jsonb, evidence => $8::jsonb${withExpected ? ', expected_attempt => $9::integer' : ''})`;
  try {
    let row: z.output<typeof resolveRow> | undefined;
    if (caps.resolveTakesExpectedAttempt) {
      [row] = await db.rows(resolveRow, call(true), [...args, r.expectedAttempt]);
    } else {
      // Until settle.resolve takes the precondition itself: the call and the check in one
      // transaction. settle.resolve holds the operation's row lock to the end of it, and its
      // answer says which attempt it judged (a completed resolution settles through attempt N+1),
      // so a resolution of anything but the attempt the page showed is rolled back.
      row = await db.transaction(async (tx) => {
        const [answer] = await tx.rows(resolveRow, call(false), args);
        if (answer === undefined) throw new Error('settle.resolve answered no row');
        const judged = answer.outcome === 'resolved' && answer.status === 'completed' ? answer.attempt - 1 : answer.attempt;
        if (answer.outcome === 'already_final' || judged !== r.expectedAttempt) {
          throw new StalePageError(
            `resolve refused: the operation moved on (it is ${answer.status_before} at attempt ${answer.outcome === 'already_final' ? answer.attempt : judged}; this page showed attempt ${r.expectedAttempt})`,
            JSON.stringify({ tenant: r.tenant, key: r.key, expected_attempt: r.expectedAttempt, attempt: answer.outcome === 'already_final' ? answer.attempt : judged, status: answer.status_before }),
            'Read the operation again (its attempts and audit trail say what happened since) and decide on what it shows now. (Checked by the console in the resolution\'s transaction: this database\'s settle.resolve takes no expected_attempt.)',
          );
        }
        return answer;
      });
    }
    if (row === undefined) throw new Error('settle.resolve answered no row');
    return {
      ok: row.outcome === 'resolved',
      summary: row.outcome === 'resolved'
        ? `resolved: ${row.status_before} → ${row.status}`
        : `already final (${row.status}${row.reason === null ? '' : `, ${row.reason}`}): nothing changed`,
      fields: [['outcome', row.outcome], ['status before', row.status_before], ['status', row.status], ['attempt', row.attempt],
        ['settled attempt', row.settled_attempt], ['result', row.result], ['error', row.error]],
      error: null,
    };
  } catch (error) {
    return refused('resolve refused', error);
  }
}

export async function redriveAction(db: ConsoleDatabase, tenant: string, key: string, attempts: number, reason: string | null): Promise<ActionAnswer> {
  try {
    const [row] = await db.rows(z.object({ status: z.string(), attempt: z.number(), max_attempts: z.number(), redrive_count: z.number() }),
      `select status::text as status, attempt, max_attempts, redrive_count
         from settle.redrive(tenant => $1, key => $2, additional_attempts => $3, reason => $4)`, [tenant, key, attempts, reason]);
    if (row === undefined) return { ok: false, summary: 'redrive refused: operation not found', fields: [], error: null };
    return { ok: true, summary: `redriven: now ${row.status}`, fields: [['status', row.status], ['attempt', row.attempt], ['max attempts', row.max_attempts], ['redrives', row.redrive_count]], error: null };
  } catch (error) {
    return refused('redrive refused', error);
  }
}

export async function expireLeasesAction(db: ConsoleDatabase): Promise<ActionAnswer> {
  try {
    const [row] = await db.rows(z.object({ expired: z.number(), dead_lettered: z.number() }),
      'select expired::int as expired, dead_lettered::int as dead_lettered from settle.expire_leases()');
    return { ok: true, summary: `expired ${row?.expired ?? 0} lapsed leases`, fields: [['expired', row?.expired], ['dead-lettered', row?.dead_lettered]], error: null };
  } catch (error) {
    return refused('expire leases refused', error);
  }
}

const resetRow = z.object({ lane: z.number(), position_before: z.string(), position_after: z.string(), events_to_deliver: z.number(), applied: z.boolean() });
export type ResetRow = z.output<typeof resetRow>;

/** `to`: 'now' (skip the backlog), 'earliest' (every retained event) or an ISO time. */
export function resetTarget(to: string): string | null {
  return to === 'now' ? null : to === 'earliest' ? '-infinity' : to;
}

export async function resetConsumer(db: ConsoleDatabase, consumer: string, to: string, dryRun: boolean): Promise<{ rows: ResetRow[] } | { error: ApiError }> {
  try {
    const rows = await db.rows(resetRow, `select lane, position_before, position_after, events_to_deliver::int as events_to_deliver, applied
      from settle.reset_consumer(name => $1, to_time => $2::timestamptz, dry_run => $3)`, [consumer, resetTarget(to), dryRun]);
    return { rows };
  } catch (error) {
    return { error: apiError(error) };
  }
}
