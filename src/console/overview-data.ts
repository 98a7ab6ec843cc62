import { z } from 'zod';
import type { Capabilities } from './capabilities.js';
import type { ConsoleDatabase } from './database.js';

// What the overview reads, each through a view the login may read, each a bounded range of an
// index: per minute of the last hour, the first and last few operations that reached a final
// status (operations_terminal_by_age_idx) or an open one (operations_needing_attention_idx),
// never the whole hour (EDGE); the waiting operations and dead letters (ranges of
// operations_needing_attention_idx, counts capped at COUNT_CAP, oldest and newest from the ends
// of the ranges); settle.metrics, the feed lanes (at most 1,000 events per key slot),
// settle.upkeep, settle.feed_horizon. bench/console.ts grows the last hour's traffic and the
// feed's backlog and prints each read's own execution time.
//
// Why the reads look the way they do: the tables have row-level security, and an enum equality is
// not leakproof, so behind a view the planner neither uses the statistics of status (it guesses a
// quarter of the table for any status, half for a list of two) nor treats `status = 'x'` as
// fixing the index's first column. A read that wants the first rows of a status range therefore
// orders by the whole index key (status, updated_at) and says LIMIT: the ordered index scan is
// then the only plan without a sort, and it stops after LIMIT rows; a read of a whole range names
// its statuses as a range (`between`), which the planner prices as few rows.

const date = z.date();
const count = z.number();

const sampledRow = z.object({
  minute: date,
  status: z.string(),
  total: count,
  first_n: count,
  all_n: count,
  last_n: count,
  first_start: date.nullable(),
  first_end: date.nullable(),
  first_distinct: count,
  last_start: date.nullable(),
  last_end: date.nullable(),
  last_distinct: count,
});
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

export type SampledRow = z.output<typeof sampledRow>;

/** Operations that reached `status` in a minute: counted, estimated, or at least `n` (see EDGE). */
export interface MinuteRow {
  readonly minute: Date;
  readonly status: string;
  readonly n: number;
  readonly kind: 'exact' | 'estimated' | 'at-least';
}
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

/**
 * A minute with more operations than 2 × EDGE is estimated from its first and last EDGE: their
 * arrival rates, and the time between them at the mean of the two (exact for steady traffic and
 * for one burst). Where those arrive in clumps of one timestamp (batches: settle.complete_many
 * stamps its whole batch alike) no rate can be read, and the minute shows what was read as a
 * lower bound. The chart reads at most 3 × EDGE operations of a minute (9,000 an hour), however
 * busy the hour was.
 */
export const EDGE = 50;

const HOUR = `generate_series(date_trunc('minute', statement_timestamp()) - interval '59 minutes',
                              date_trunc('minute', statement_timestamp()), interval '1 minute') m(minute)`;

/**
 * Per minute of the last hour and status of `statuses`: of the first 2 × EDGE operations matching
 * `where` (every one when fewer: then `total` is exact) how many have the status, among the first
 * EDGE and among all; and only when there were more, among the last EDGE; with the first and last
 * times and the distinct times of each end. `order` is the key of the index range read (its last
 * column updated_at).
 */
function sampled(where: string, order: string, statuses: readonly string[]): string {
  const desc = order
    .split(',')
    .map((c) => `${c.trim()} desc`)
    .join(', ');
  const range = `${where} and o.updated_at >= m.minute and o.updated_at < m.minute + interval '1 minute'`;
  return `
select m.minute, s.status, w.total, s.first_n, s.all_n, coalesce(s.last_n, 0) as last_n,
       w.first_start, w.first_end, w.first_distinct, l.last_start, l.last_end, coalesce(l.last_distinct, 0) as last_distinct
  from ${HOUR}
  cross join lateral (
    select count(*)::int as total, min(x.updated_at) as first_start,
           max(x.updated_at) filter (where x.i <= ${EDGE}) as first_end,
           count(distinct x.updated_at) filter (where x.i <= ${EDGE})::int as first_distinct,
           ${statuses.map((st) => `count(*) filter (where x.i <= ${EDGE} and x.status = '${st}')::int as "${st}_first", count(*) filter (where x.status = '${st}')::int as "${st}_all"`).join(',\n           ')}
      from (select o.status, o.updated_at, row_number() over (order by ${order}) as i
              from (select o.status, o.updated_at from settle.operations o where ${range}
                     order by ${order} limit ${2 * EDGE}) o) x) w
  left join lateral (
    select min(z.updated_at) as last_start, max(z.updated_at) as last_end,
           count(distinct z.updated_at)::int as last_distinct,
           ${statuses.map((st) => `count(*) filter (where z.status = '${st}')::int as "${st}_last"`).join(',\n           ')}
      from (select o.status, o.updated_at from settle.operations o where w.total >= ${2 * EDGE} and ${range}
             order by ${desc} limit ${EDGE}) z) l on true
  cross join lateral (values ${statuses.map((st) => `('${st}', w."${st}_first", w."${st}_all", l."${st}_last")`).join(', ')}) s(status, first_n, all_n, last_n)
 where s.all_n > 0`;
}

// The final outcomes: ranges of operations_terminal_by_age_idx (updated_at, where status is
// completed or failed). The open ones (unknown, conflict: went so in that minute and are so now):
// per status, ranges of operations_needing_attention_idx (status, updated_at).
const SETTLED_PER_MINUTE = sampled(`o.status in ('completed', 'failed')`, 'o.updated_at', ['completed', 'failed']);
const OPEN_PER_MINUTE = ['unknown', 'conflict']
  .map((status) => sampled(`o.status = '${status}'`, 'o.status, o.updated_at', [status]))
  .join('\nunion all');

/** A minute's count per status from its samples: exact, estimated, or at least (see EDGE). */
export function minuteCounts(rows: readonly SampledRow[]): MinuteRow[] {
  return rows.map((r) => {
    const exact = { minute: r.minute, status: r.status, n: r.all_n, kind: 'exact' as const };
    if (r.total < 2 * EDGE) return exact;
    if (
      r.first_start === null ||
      r.first_end === null ||
      r.last_start === null ||
      r.last_end === null ||
      r.first_distinct < EDGE / 2 ||
      r.last_distinct < EDGE / 2
    )
      return { ...exact, kind: 'at-least' as const };
    // Rates of the first and last EDGE of the whole sample (every status), then this status's share.
    // EDGE arrivals span EDGE - 1 gaps, and (n - 2) / span is the unbiased rate of a Poisson stream.
    const ms = (from: Date, to: Date) => Math.max(1, to.getTime() - from.getTime());
    const rate = ((EDGE - 2) / ms(r.first_start, r.first_end) + (EDGE - 2) / ms(r.last_start, r.last_end)) / 2;
    const total = 2 * EDGE + Math.max(0, r.last_start.getTime() - r.first_end.getTime()) * rate;
    const share = (r.first_n + r.last_n) / (2 * EDGE);
    return { ...exact, n: Math.max(r.all_n, Math.round(total * share)), kind: 'estimated' as const };
  });
}

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
// dead_letter_reason_fits_status), as ranges, so the read steps over the pending range of the
// index: a list of statuses looked like half the table and was read sequentially, and with
// `status = 'failed'` the planner may also prove the predicate of operations_terminal_by_age_idx
// (failed or completed) and read every settled operation there; the range [failed, failed] reads
// only the failed range of operations_needing_attention_idx, which holds the failed dead letters
// and nothing else. The oldest and the newest are the first and last entry of each status's
// range (by updated_at, which dead-lettering sets with dead_lettered_at).
const DEAD_LETTER_STATUSES = [
  ['attempts_exhausted', ['failed']],
  ['needs_reconciliation', ['unknown', 'conflict']],
] as const;
const firstDeadLetter = (status: string, direction: 'asc' | 'desc') =>
  `(select d.dead_lettered_at from settle.dead_letters d where d.status between '${status}' and '${status}'
     order by d.status ${direction}, d.updated_at ${direction} limit 1)`;
const DEAD_LETTERS = DEAD_LETTER_STATUSES.map(
  ([reason, statuses]) => `
select '${reason}' as reason,
       (select count(*)::int from (select 1 from settle.dead_letters d
                                    where d.status between '${statuses[0]}' and '${statuses.at(-1)}'
                                    limit ${COUNT_CAP + 1}) n) as n,
       least(${statuses.map((s) => firstDeadLetter(s, 'asc')).join(', ')}) as oldest,
       greatest(${statuses.map((s) => firstDeadLetter(s, 'desc')).join(', ')}) as newest`,
).join('\nunion all');

// The five least recently changed dead letters needing reconciliation: the first five of each
// status's range, merged.
const OLDEST_NEEDING_RECONCILIATION = `
select x.tenant, x.key, x.status, x.reason, x.at from (
  ${['unknown', 'conflict']
    .map(
      (status) => `(select d.tenant, d.key, d.status::text as status, d.reason, d.dead_lettered_at as at, d.updated_at
     from settle.dead_letters d where d.status between '${status}' and '${status}'
    order by d.status, d.updated_at limit 5)`,
    )
    .join('\n  union all\n  ')}) x
 order by x.updated_at, x.tenant, x.key limit 5`;

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
  'settled per minute': SETTLED_PER_MINUTE,
  'unknown per minute': OPEN_PER_MINUTE,
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
    ops ? db.rows(sampledRow, SETTLED_PER_MINUTE) : [],
    ops ? db.rows(sampledRow, OPEN_PER_MINUTE) : [],
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
  const now = new Date();
  return {
    now,
    minutes: minuteCounts([...final, ...open]),
    waiting,
    deadLetters,
    oldest,
    lanes,
    horizon,
    upkeep,
    metrics: metrics === null ? null : (metrics[0] ?? null),
  };
}
