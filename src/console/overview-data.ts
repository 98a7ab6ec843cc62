import { z } from 'zod';
import type { Capabilities } from './capabilities.js';
import type { ConsoleDatabase } from './database.js';

// What the overview reads, each through a view the login may read, each a bounded range of an
// index: the operations that reached a final status in the last hour (operations_terminal_by_age_idx
// from an hour ago) or an open one (operations_needing_attention_idx), the waiting operations and
// dead letters (ranges of operations_needing_attention_idx, counts capped at COUNT_CAP),
// settle.metrics, the feed lanes, settle.upkeep. bench/console.ts measures it at a million
// operations and prints each read's own execution time.
//
// Why the reads look the way they do: the tables have row-level security, and an enum equality is
// not leakproof, so behind a view the planner neither uses the statistics of status (it guesses a
// quarter of the table for any status) nor treats `status = 'x'` as fixing the index's first
// column. A read that wants the first rows of a status range therefore orders by the whole index
// key (status, updated_at) and says LIMIT: the ordered index scan is then the only plan without a
// sort, and it stops after LIMIT rows.

const date = z.date();
const count = z.number();

const minuteRow = z.object({ minute: z.date(), status: z.string(), n: count });
const waitingRow = z.object({ status: z.string(), n: count, oldest: date.nullable() });
const deadRow = z.object({ reason: z.string().nullable(), n: count, oldest: date.nullable(), newest: date.nullable() });
const oldestRow = z.object({
  tenant: z.string(),
  key: z.string(),
  status: z.string(),
  reason: z.string().nullable(),
  at: date,
});
const laneRow = z.object({
  consumer: z.string(),
  tenants: z.array(z.string()).nullable(),
  lanes: count,
  lane: count,
  position: z.string(),
  leased: z.boolean(),
  lease_expires_at: date.nullable(),
  acked_at: date.nullable(),
  lag_events: count,
  oldest_unacked_at: date.nullable(),
  lag_seconds: count,
});
const holderRow = z.object({
  pid: z.number().nullable(),
  login: z.string().nullable(),
  application_name: z.string().nullable(),
  state: z.string().nullable(),
  xid: z.string(),
  xact_age_seconds: z.number().nullable(),
  holds_horizon: z.boolean(),
  feed_consumer: z.boolean(),
  consumer: z.string().nullable(),
  lane: z.number().nullable(),
});
const upkeepRow = z.object({
  job: z.string(),
  every: z.string(),
  last_started_at: date.nullable(),
  last_finished_at: date.nullable(),
  last_ok: z.boolean().nullable(),
  last_error: z.string().nullable(),
  last_by: z.string().nullable(),
  runs: count,
  failures: count,
  next_due_at: date,
  overdue: z.boolean(),
});
const metricsRow = z.record(z.string(), z.unknown());

export type MinuteRow = z.output<typeof minuteRow>;
export type LaneRow = z.output<typeof laneRow>;
export type HolderRow = z.output<typeof holderRow>;

export interface Horizon {
  /** The feed's horizon: every transaction with a smaller id has ended. */
  readonly xid: string;
  /** The open transactions holding it back, oldest first; null: the login may not read settle.feed_horizon. */
  readonly holders: readonly HolderRow[] | null;
}
export type UpkeepRow = z.output<typeof upkeepRow>;

export interface OverviewData {
  readonly now: Date;
  readonly minutes: readonly MinuteRow[];
  readonly waiting: readonly z.output<typeof waitingRow>[];
  readonly deadLetters: readonly z.output<typeof deadRow>[];
  readonly oldest: readonly z.output<typeof oldestRow>[];
  readonly lanes: readonly LaneRow[] | null;
  readonly horizon: Horizon;
  readonly upkeep: readonly UpkeepRow[] | null;
  readonly metrics: Readonly<Record<string, unknown>> | null;
}

const minutes = (statuses: string) => `
select date_trunc('minute', o.updated_at) as minute, o.status::text as status, count(*)::int as n
  from settle.operations o
 where o.status in ${statuses} and o.updated_at > statement_timestamp() - interval '1 hour'
 group by 1, 2`;

/** Counts stop here: a retry backlog of a million pending operations is "10,000+", read in milliseconds. */
export const COUNT_CAP = 10_000;

// Per status, its count (up to COUNT_CAP + 1) and its oldest: the first rows of a status range of
// operations_needing_attention_idx (status, updated_at), never the whole range. Each status is a
// literal: the planner uses a partial index only for a predicate it can prove at plan time.
const WAITING = ['pending', 'unknown', 'conflict']
  .map(
    (status) => `
select '${status}' as status,
       (select count(*)::int from (select 1 from settle.operations o where o.status = '${status}'
                                    order by o.status, o.updated_at limit ${COUNT_CAP + 1}) n) as n,
       (select o.updated_at from settle.operations o where o.status = '${status}'
         order by o.status, o.updated_at limit 1) as oldest`,
  )
  .join('\nunion all');

// Dead letters by reason, each through the statuses its reason allows (row rule
// dead_letter_reason_fits_status), so the read steps over the pending range of the index. The
// failed ones as the range [failed, failed]: with `status = 'failed'` the planner may also prove
// the predicate of operations_terminal_by_age_idx (failed or completed) and, guessing without
// statistics, read every settled operation there; the range reads only the failed range of
// operations_needing_attention_idx, which holds the failed dead letters and nothing else.
// Oldest and newest read the whole range: the dead letters themselves, what metrics reads too.
const DEAD_LETTER_STATUSES = [
  ['attempts_exhausted', `d.status between 'failed' and 'failed'`],
  ['needs_reconciliation', `d.status in ('unknown', 'conflict')`],
] as const;
const DEAD_LETTERS = DEAD_LETTER_STATUSES.map(
  ([reason, statuses]) => `
select '${reason}' as reason,
       (select count(*)::int from (select 1 from settle.dead_letters d where d.reason = '${reason}' and ${statuses}
                                    limit ${COUNT_CAP + 1}) n) as n,
       (select min(d.dead_lettered_at) from settle.dead_letters d where d.reason = '${reason}' and ${statuses}) as oldest,
       (select max(d.dead_lettered_at) from settle.dead_letters d where d.reason = '${reason}' and ${statuses}) as newest`,
).join('\nunion all');

const OLDEST_NEEDING_RECONCILIATION = `
select d.tenant, d.key, d.status::text as status, d.reason, d.dead_lettered_at as at
  from settle.dead_letters d where d.status in ('unknown', 'conflict')
 order by d.dead_lettered_at, d.tenant, d.key limit 5`;

// The horizon: the oldest transaction with an id holds back every feed consumer (docs/feed.md).
// settle.feed_horizon names the open transactions, oldest first (pid, login, state, age), read as
// the engine's owner, which may see every session; the console's own sessions never appear
// (their reads take no transaction id). Ids are cluster-wide: so are the holders.
export const HORIZON = 'select pg_snapshot_xmin(pg_current_snapshot())::text as xid';
/** The oldest open transactions the overview lists. */
export const HOLDERS_SHOWN = 10;

export const HORIZON_HOLDERS = `
select f.pid, f.login, f.application_name, f.state, f.xid, f.xact_age_seconds, f.holds_horizon, f.feed_consumer,
       f.consumer, f.lane
  from settle.feed_horizon f limit ${HOLDERS_SHOWN}`;

export const LANES = `
select consumer, tenants, lanes, lane, position, leased, lease_expires_at, acked_at, lag_events::float8 as lag_events,
       oldest_unacked_at, lag_seconds
  from settle.feed_consumers order by consumer, lane`;

/** The overview's reads by name, for bench/console.ts to EXPLAIN one by one. */
export const OVERVIEW_QUERIES: Readonly<Record<string, string>> = {
  'settled per minute': minutes(`('completed', 'failed')`),
  'unknown per minute': minutes(`('unknown', 'conflict')`),
  waiting: WAITING,
  'dead letters': DEAD_LETTERS,
  'oldest needing reconciliation': OLDEST_NEEDING_RECONCILIATION,
  'settle.metrics': 'select * from settle.metrics',
  'settle.feed_consumers': LANES,
  'settle.upkeep': 'select * from settle.upkeep',
  horizon: HORIZON,
  'settle.feed_horizon': HORIZON_HOLDERS,
};

export async function readLanes(db: ConsoleDatabase, caps: Capabilities): Promise<LaneRow[] | null> {
  return caps.read.feedConsumers ? db.rows(laneRow, LANES) : null;
}

export async function readHorizonXid(db: ConsoleDatabase): Promise<string> {
  const [row] = await db.rows(z.object({ xid: z.string() }), HORIZON);
  if (row === undefined) throw new Error('horizon: no row');
  return row.xid;
}

/** The horizon and, where the login may read settle.feed_horizon, the transactions holding it. */
export async function readHorizon(db: ConsoleDatabase, caps: Capabilities): Promise<Horizon> {
  const [xid, holders] = await Promise.all([
    readHorizonXid(db),
    caps.read.feedHorizon ? db.rows(holderRow, HORIZON_HOLDERS) : null,
  ]);
  return { xid, holders };
}

export async function readOverview(db: ConsoleDatabase, caps: Capabilities): Promise<OverviewData> {
  const ops = caps.read.operations;
  const [final, open, waiting, deadLetters, oldest, lanes, horizon, upkeep, metrics] = await Promise.all([
    ops ? db.rows(minuteRow, minutes(`('completed', 'failed')`)) : [],
    ops ? db.rows(minuteRow, minutes(`('unknown', 'conflict')`)) : [],
    ops ? db.rows(waitingRow, WAITING) : [],
    caps.read.deadLetters ? db.rows(deadRow, DEAD_LETTERS) : [],
    caps.read.deadLetters ? db.rows(oldestRow, OLDEST_NEEDING_RECONCILIATION) : [],
    readLanes(db, caps),
    readHorizon(db, caps),
    caps.read.upkeep
      ? db.rows(
          upkeepRow,
          `select job, every::text as every, last_started_at, last_finished_at, last_ok, last_error, last_by,
                                   runs::int as runs, failures::int as failures, next_due_at, overdue from settle.upkeep order by job`,
        )
      : null,
    caps.read.metrics ? db.rows(metricsRow, 'select * from settle.metrics') : null,
  ]);
  return {
    now: new Date(),
    minutes: [...final, ...open],
    waiting,
    deadLetters,
    oldest,
    lanes,
    horizon,
    upkeep,
    metrics: metrics === null ? null : (metrics[0] ?? null),
  };
}
