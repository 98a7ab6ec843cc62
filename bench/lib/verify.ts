import type pg from 'pg';
import type { Check } from './types.js';

/**
 * Correctness counters read from the run database after each run. Never timing: a check
 * fails on a broken invariant, never on a slow run.
 */

const count = async (db: pg.Client, sql: string, params: unknown[] = []): Promise<number> =>
  Number((await db.query<{ n: string }>(sql, params)).rows[0]?.n ?? 0);

export function check(name: string, ok: boolean, detail: string): Check {
  return { name, ok, detail };
}

/**
 * Audit outcome counts for one tenant, keyed `event:outcome` (e.g. `claim:acquired`), from the
 * trail as settle.audit_log shows it (audit rows and the events logged on attempt rows).
 */
export async function auditOutcomes(db: pg.Client, tenant: string): Promise<Record<string, number>> {
  const rows = await db.query<{ event: string; outcome: string; n: string }>(
    `select event, outcome, count(*)::text as n from settle.audit_log
      where tenant = $1 and actor is distinct from 'seed' and actor is distinct from 'setup'
      group by 1, 2 order by 1, 2`,
    [tenant],
  );
  return Object.fromEntries(rows.rows.map((r) => [`${r.event}:${r.outcome}`, Number(r.n)]));
}

export const completedOperations = (db: pg.Client): Promise<number> =>
  count(db, `select count(*) as n from settle_private.operations where tenant = 'bench' and status = 'completed'`);

export const unfinishedOperations = (db: pg.Client): Promise<number> =>
  count(db, `select count(*) as n from settle_private.operations where tenant = 'bench' and status <> 'completed'`);

/**
 * Engine runs on fresh keys (cycle, local, scale, client): every new operation completed
 * with exactly one settlement; at most `maxInFlight` (clients x runs in this database, the
 * warm-up included) in flight when a run was cut off. `processed` counts the warm-up too.
 */
export async function verifyFreshKeyCycles(
  db: pg.Client,
  /** preexisting: unfinished operations before the run (generated scale rows, earlier cut-off runs). */
  opts: { processed: number; maxInFlight: number; preexisting: number; completedBefore: number },
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const completed = await completedOperations(db);
  const newlyCompleted = completed - opts.completedBefore;
  const settled = await count(db, `select count(*) as n from settle.attempts where tenant = 'bench' and settled`);
  const doubly = await count(
    db,
    `select count(*) as n from (select 1 from settle.attempts where settled group by tenant, key having count(*) > 1) d`,
  );
  const unfinished = await unfinishedOperations(db);
  const outcomes = await auditOutcomes(db, 'bench');
  const unexpected = Object.entries(outcomes).filter(([k]) => k !== 'claim:acquired' && k !== 'complete:settled');
  const inFlight = unfinished - opts.preexisting;
  return {
    counters: { completed, settledAttempts: settled, inFlight, ...outcomes },
    checks: [
      check(
        'one settlement per completed operation',
        settled === completed,
        `${settled} settled attempts, ${completed} completed operations`,
      ),
      check('no operation settled twice', doubly === 0, `${doubly} operations with more than one settled attempt`),
      check(
        'every transaction completed its operation',
        newlyCompleted >= opts.processed && newlyCompleted - opts.processed <= opts.maxInFlight,
        `${newlyCompleted} completed for ${opts.processed} processed transactions (at most ${opts.maxInFlight} cut off)`,
      ),
      check(
        'at most one operation in flight per client and run',
        inFlight >= 0 && inFlight <= opts.maxInFlight,
        `${inFlight} unfinished new operations`,
      ),
      check(
        'only acquired claims and settled completes',
        unexpected.length === 0,
        unexpected.length === 0 ? 'none unexpected' : JSON.stringify(Object.fromEntries(unexpected)),
      ),
    ],
  };
}

/**
 * Replay runs: every measured claim answered replay (replay.sql's \gset aborts the run on any
 * other outcome) and nothing was written: a replay answer writes no audit row
 * (docs/protocol.md), so the audit log holds only the seeding's rows and every operation keeps
 * its one settlement.
 */
export async function verifyReplay(
  db: pg.Client,
  opts: { processed: number; keys: number },
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const outcomes = await auditOutcomes(db, 'bench');
  const completed = await count(
    db,
    `select count(*) as n from settle_private.operations where tenant = 'bench' and status = 'completed'`,
  );
  const settled = await count(db, `select count(*) as n from settle.attempts where tenant = 'bench' and settled`);
  const attempts = await count(db, `select count(*) as n from settle.attempts where tenant = 'bench'`);
  const written = Object.values(outcomes).reduce((a, b) => a + b, 0);
  return {
    counters: { completed, settledAttempts: settled, attempts, auditRowsWritten: written },
    checks: [
      check(
        'replay answers wrote nothing',
        written === 0,
        `${written} audit rows by the measured claims ${JSON.stringify(outcomes)}`,
      ),
      check(
        'one settlement per completed operation',
        completed === opts.keys && settled === opts.keys && attempts === opts.keys,
        `${completed} completed, ${settled} settled of ${attempts} attempts, ${opts.keys} keys`,
      ),
    ],
  };
}

/** pkread runs: the table holds the seeded keys, every one completed, and nothing wrote to it. */
export async function verifyPkread(
  db: pg.Client,
  keys: number,
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const rows = await count(db, `select count(*) as n from bench.pkread where status = 'completed'`);
  return {
    counters: { rows },
    checks: [check('the read table holds the replay set', rows === keys, `${rows} completed rows, ${keys} keys`)],
  };
}

/**
 * Hotkey runs: per key and epoch exactly one acquired claim, one attempt, one settlement;
 * every other claim answered in_progress or replay.
 */
export async function verifyHotkey(db: pg.Client): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const perKey = (
    await db.query<{
      keys: string;
      bad_acquired: string;
      bad_attempts: string;
      bad_settled: string;
      not_completed: string;
    }>(
      `select count(*)::text as keys,
              count(*) filter (where acquired <> 1)::text as bad_acquired,
              count(*) filter (where attempts <> 1)::text as bad_attempts,
              count(*) filter (where settled <> 1)::text as bad_settled,
              count(*) filter (where o.status <> 'completed')::text as not_completed
         from settle_private.operations o,
              lateral (select count(*) as attempts, count(*) filter (where a.settled) as settled
                         from settle.attempts a where a.tenant = o.tenant and a.key = o.key) a,
              lateral (select count(*) as acquired from settle.audit_log l
                        where l.tenant = o.tenant and l.key = o.key and l.event = 'claim' and l.outcome = 'acquired') l
        where o.tenant = 'hot'`,
    )
  ).rows[0];
  const keys = Number(perKey?.keys ?? 0);
  const outcomes = await auditOutcomes(db, 'hot');
  // in_progress and replay answers write no audit row (docs/protocol.md); a row of any other
  // outcome than the one acquired claim and its complete per key and epoch is unexpected.
  const unexpected = Object.entries(outcomes).filter(([k]) => !['claim:acquired', 'complete:settled'].includes(k));
  return {
    counters: { keyEpochs: keys, ...outcomes },
    checks: [
      check(
        'exactly one acquired claim per key per epoch',
        keys > 0 && Number(perKey?.bad_acquired) === 0,
        `${perKey?.bad_acquired} of ${keys} key-epochs differ`,
      ),
      check(
        'exactly one attempt per key per epoch',
        Number(perKey?.bad_attempts) === 0,
        `${perKey?.bad_attempts} of ${keys} key-epochs differ`,
      ),
      check(
        'exactly one settlement per key per epoch',
        Number(perKey?.bad_settled) === 0 && Number(perKey?.not_completed) === 0,
        `${perKey?.bad_settled} key-epochs without exactly one settlement, ${perKey?.not_completed} not completed`,
      ),
      check(
        'only acquired claims and settled completes audited',
        unexpected.length === 0,
        unexpected.length === 0 ? 'none unexpected' : JSON.stringify(Object.fromEntries(unexpected)),
      ),
    ],
  };
}

/** Baseline runs: rows written and, for two-transaction baselines, settled. */
export async function verifyBaseline(
  db: pg.Client,
  scenario: 'floor2' | 'lww' | 'stripe',
  opts: { processed: number; maxInFlight: number },
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const sql = {
    floor2: `select count(*) as n, count(*) filter (where settled_at is null) as open from bench.floor2`,
    lww: `select count(*) as n, 0 as open from bench.lww`,
    stripe: `select count(*) as n, count(*) filter (where locked_at is not null or recovery_point <> 'finished') as open from bench.stripe_keys`,
  }[scenario];
  const row = (await db.query<{ n: string; open: string }>(sql)).rows[0];
  const rows = Number(row?.n ?? 0);
  const open = Number(row?.open ?? 0);
  return {
    counters: { rows, open },
    checks: [
      check(
        'one row per transaction',
        rows >= opts.processed && rows - opts.processed <= opts.maxInFlight,
        `${rows} rows for ${opts.processed} transactions`,
      ),
      check('at most one unfinished row per client and run', open <= opts.maxInFlight, `${open} unfinished rows`),
    ],
  };
}

/**
 * spec4 runs: every operation row the run wrote is completed through attempt 1 and logs both
 * events of the cycle as the engine's operation rows do: the claim that opened its attempt
 * (claim_seq 1, an audit id, no status before, running after) and the success that settled it
 * (settled_seq 2, another audit id, running before, reason current_attempt); one row per
 * transaction; at most one operation per client and run cut off between its two transactions
 * (running, its claim logged and no settlement); no attempts row and nothing in spec4_audit_log
 * (a settled cycle writes neither).
 */
export async function verifySpec4(
  db: pg.Client,
  opts: { processed: number; maxInFlight: number },
): Promise<{ counters: Record<string, number>; checks: Check[] }> {
  const row = (
    await db.query<{ completed: string; open: string; bad_completed: string; bad_open: string; audit_rows: string }>(
      `select count(*) filter (where o.status = 'completed')::text as completed,
              count(*) filter (where o.status <> 'completed')::text as open,
              count(*) filter (where o.status = 'completed'
                                 and (o.attempt = 1 and o.settled_attempt = 1 and o.claim_seq = 1
                                          and o.claim_audit_id is not null and o.claim_status_before is null
                                          and o.claim_status_after = 'running' and o.settled_seq = 2
                                          and o.settled_audit_id is not null and o.settled_audit_id <> o.claim_audit_id
                                          and o.settled_status_before = 'running' and o.settled_reason = 'current_attempt'
                                          and o.settled_by is not null) is not true)::text as bad_completed,
              count(*) filter (where o.status <> 'completed'
                                 and (o.status = 'running' and o.attempt = 1 and o.claim_seq = 1
                                      and o.settled_seq is null and o.settled_attempt is null) is not true)::text as bad_open,
              ((select count(*) from bench.spec4_audit_log) + (select count(*) from bench.spec4_attempts))::text as audit_rows
         from bench.spec4_operations o`,
    )
  ).rows[0];
  const completed = Number(row?.completed ?? 0);
  const open = Number(row?.open ?? 0);
  const badCompleted = Number(row?.bad_completed ?? 0);
  const badOpen = Number(row?.bad_open ?? 0);
  const auditRows = Number(row?.audit_rows ?? 0);
  return {
    counters: { completed, open, badCompleted, badOpen, auditRows },
    checks: [
      check(
        'one completed operation per transaction',
        completed >= opts.processed && completed - opts.processed <= opts.maxInFlight,
        `${completed} completed for ${opts.processed} transactions`,
      ),
      check(
        'every completed operation: settled through attempt 1, its claim and settlement logged on it',
        badCompleted === 0,
        `${badCompleted} of ${completed} completed operations differ`,
      ),
      check(
        'at most one unfinished operation per client and run',
        open <= opts.maxInFlight && badOpen === 0,
        `${open} unfinished (${badOpen} not running with the claim of attempt 1 logged)`,
      ),
      check('no attempts row and nothing in spec4_audit_log', auditRows === 0, `${auditRows} rows`),
    ],
  };
}
