import type pg from 'pg';
import { sql } from 'slonik';
import { createSettleClient } from '../client/client.js';
import type { FeedEvent, SettleClient } from '../client/types.js';
import { deriveSeed, mulberry32 } from '../shared/prng.js';
import type { DeliveryRow } from './history.js';
import { installSimulatorSql } from './ledger.js';

/**
 * The seed's downstream: "the settlement worker marks the settlement completed, then the reward
 * worker credits it". Two reward workers credit the run's completed payouts into one table,
 * settle_sim.sim_rewards, each in its own transactions:
 *
 * - the feed consumer (`<run>rewards`): settle.consume() in transaction mode, two processes over
 *   two lanes; read, credit and acknowledge commit together (docs/feed.md, same-database exactly
 *   once). Its processes are killed mid-batch (pg_terminate_backend of the batch's connection,
 *   after the credits were written, before the ack and the commit) and restarted;
 * - the naive poller (`<run>naive-poller`): what docs/protocol.md once advised, "poll
 *   settle.settlements by settled_at": credit every settlement with settled_at above its cursor,
 *   then move the cursor to the highest settled_at seen, in one transaction. It is exactly once
 *   per row it sees; what it loses is the row whose transaction stamped settled_at earlier and
 *   committed later (docs/feed.md, "Why not poll by settled_at").
 *
 * The table has no unique constraint on (consumer, tenant, key): a second credit must show up
 * (and be counted, and fail the checker), not be refused.
 */
const INSTALL_SQL = `
create schema if not exists settle_sim;
create table if not exists settle_sim.sim_rewards (
  delivery_id bigint generated always as identity,
  consumer text not null,
  tenant text not null,
  key text not null,
  event_id bigint,
  status text not null,
  credited boolean not null,
  amount_cents bigint,
  applied_at timestamptz not null default clock_timestamp(),
  constraint sim_rewards_pkey primary key (delivery_id),
  constraint credited_iff_completed check (credited = (status = 'completed'))
);
create index if not exists sim_rewards_by_consumer_idx on settle_sim.sim_rewards (consumer, tenant, key);
comment on table settle_sim.sim_rewards is
  'pg-settle simulator: the reward worker downstream of the settlements, one row per outcome a consumer applied (event_id: the feed''s delivery id, null for the naive poller); credited rows are rewards.';
create table if not exists settle_sim.naive_cursors (
  consumer text not null,
  settled_after timestamptz not null,
  constraint naive_cursors_pkey primary key (consumer)
);
comment on table settle_sim.naive_cursors is
  'pg-settle simulator: the naive poller''s position, the highest settled_at it has credited.';
`;

export function installRewardsSql(pool: pg.Pool): Promise<void> {
  return installSimulatorSql(pool, INSTALL_SQL);
}

/** Credited / missing / credited twice, for one consumer, over the completed payouts of the run. */
export interface ConsumerTally {
  readonly consumer: string;
  /** Completed payouts of the run (what should be credited once each). */
  readonly payouts: number;
  readonly credited: number;
  readonly missing: number;
  readonly creditedTwice: number;
}

export interface FeedConsumerTally extends ConsumerTally {
  /** Feed events applied (completed and failed outcomes). */
  readonly events: number;
  readonly failedOutcomes: number;
  readonly batches: number;
  /** Processes killed mid-batch (their batch rolled back) and started again. */
  readonly kills: number;
  readonly processes: number;
}

export interface PollerTally extends ConsumerTally {
  readonly polls: number;
  /** Settlements held open until the poller had passed their settled_at (the slow-commit fault). */
  readonly heldPast: number;
}

const KILL_STREAM = 0xfeed;

// ---------------------------------------------------------------------------------------
// The feed consumer
// ---------------------------------------------------------------------------------------

export interface FeedConsumerOptions {
  readonly pool: pg.Pool;
  readonly connectionString: string;
  readonly name: string;
  readonly tenants: readonly string[];
  readonly seed: number;
  /** Probability that a batch's process is killed mid-batch (by batch number, seeded). */
  readonly killRate: number;
  readonly processes: number;
  readonly onError: (error: unknown) => void;
}

export interface FeedConsumer {
  /** Waits until every lane has acknowledged everything written (lag 0), then stops the processes. */
  drainAndStop(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
  readonly stats: { batches: number; events: number; kills: number; processes: number };
}

interface ConsumerProcess {
  readonly client: SettleClient;
  readonly controller: AbortController;
  done: Promise<void>;
}

/** Registers the consumer (lanes = processes) and starts its processes. */
export async function startFeedConsumer(o: FeedConsumerOptions): Promise<FeedConsumer> {
  await o.pool.query(
    `select settle.register_consumer(name => $1, tenants => $2::text[], lanes => $3, start_at => 'latest')`,
    [o.name, o.tenants, o.processes],
  );
  const stats = { batches: 0, events: 0, kills: 0, processes: 0 };
  const live = new Set<ConsumerProcess>();
  const restarts = new Set<NodeJS.Timeout>();
  let stopped = false;
  let batchNumber = 0;

  const start = (): void => {
    if (stopped) return;
    stats.processes += 1;
    const client = createSettleClient({ connectionString: o.connectionString, poolSize: 2, telemetry: false });
    const controller = new AbortController();
    const proc: ConsumerProcess = { client, controller, done: Promise.resolve() };
    live.add(proc);
    proc.done = client
      .consume(o.name, (events, { connection }) => handle(proc, events, connection), {
        batchSize: 200,
        signal: controller.signal,
        idleMs: 20,
        maxIdleMs: 200,
        errorBackoffMs: 20,
        onError: (error) => {
          // The batch of a killed process fails at its ack or commit: expected, not reported.
          if (!controller.signal.aborted) o.onError(error);
        },
      })
      .then(() => undefined, o.onError)
      .finally(async () => {
        live.delete(proc);
        await client.end().catch(() => {});
      });
  };

  async function handle(proc: ConsumerProcess, events: readonly FeedEvent[], connection: unknown): Promise<void> {
    const tx = connection as { query: SettleClientQuery };
    const batch = (batchNumber += 1);
    const rows = events.map((e) => ({
      tenant: e.tenant,
      key: e.key,
      event_id: String(e.eventId),
      status: e.status,
      amount_cents: e.status === 'completed' ? amountOf(e.result) : null,
    }));
    await tx.query(sql.unsafe`
      insert into settle_sim.sim_rewards (consumer, tenant, key, event_id, status, credited, amount_cents)
      select ${o.name}, e.tenant, e.key, e.event_id, e.status, e.status = 'completed', e.amount_cents
        from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb)
             as e(tenant text, key text, event_id bigint, status text, amount_cents bigint)`);
    // The second batch always, then each batch with probability killRate (seeded by its number).
    if (batch === 2 || mulberry32(deriveSeed(o.seed ^ KILL_STREAM, batch)).next() < o.killRate) {
      // The process dies mid-batch: its connection is terminated after the credits were written
      // and before the ack; a new process takes over. Nothing of the batch may survive.
      const { rows: pids } = await tx.query(sql.unsafe`select pg_backend_pid() as pid`);
      stats.kills += 1;
      proc.controller.abort();
      await o.pool.query('select pg_terminate_backend($1)', [(pids[0] as { pid: number }).pid]);
      const timer = setTimeout(() => {
        restarts.delete(timer);
        start();
      }, 20);
      restarts.add(timer);
      throw new Error('reward worker killed mid-batch');
    }
    stats.batches += 1;
    stats.events += events.length;
  }

  for (let i = 0; i < o.processes; i += 1) start();

  const stop = async (): Promise<void> => {
    stopped = true;
    for (const timer of restarts) clearTimeout(timer);
    restarts.clear();
    while (live.size > 0) {
      const procs = [...live];
      for (const proc of procs) proc.controller.abort();
      await Promise.all(procs.map((proc) => proc.done));
    }
  };

  return {
    stats,
    stop,
    async drainAndStop(timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const { rows } = await o.pool.query<{ lag: string }>(
          'select coalesce(sum(lag_events), 0)::text as lag from settle.feed_consumers where consumer = $1',
          [o.name],
        );
        if (rows[0]?.lag === '0') break;
        if (Date.now() > deadline) {
          o.onError(
            new Error(`the reward consumer did not catch up within ${timeoutMs} ms (lag ${rows[0]?.lag} events)`),
          );
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
      await stop();
    },
  };
}

type SettleClientQuery = (query: ReturnType<typeof sql.unsafe>) => Promise<{ rows: readonly unknown[] }>;

function amountOf(result: unknown): number | null {
  const value =
    typeof result === 'object' && result !== null ? (result as Record<string, unknown>).amount_cents : undefined;
  return typeof value === 'number' ? value : null;
}

// ---------------------------------------------------------------------------------------
// The naive poller
// ---------------------------------------------------------------------------------------

export interface NaivePoller {
  /**
   * Resolves true once the poller's cursor is above `settledAtMicros` (microseconds since the
   * epoch): a settlement stamped then and not yet committed is lost to it for good. Resolves
   * false after `timeoutMs` (no later settlement was polled meanwhile).
   */
  waitPast(settledAtMicros: bigint, timeoutMs: number): Promise<boolean>;
  /** One last poll (everything has committed), then stop. */
  finish(): Promise<void>;
  readonly stats: { polls: number; heldPast: number };
}

export function startNaivePoller(o: {
  readonly pool: pg.Pool;
  readonly name: string;
  readonly tenantPrefix: string;
  readonly intervalMs: number;
  readonly onError: (error: unknown) => void;
}): NaivePoller {
  let cursor = 0n;
  const stats = { polls: 0, heldPast: 0 };
  const waiters = new Set<{ micros: bigint; resolve: (passed: boolean) => void }>();
  let stopped = false;

  const poll = async (): Promise<void> => {
    const client = await o.pool.connect();
    try {
      await client.query('begin');
      const { rows } = await client.query<{ tenant: string; key: string; amount: string | null; micros: string }>(
        `select s.tenant, s.key, s.result ->> 'amount_cents' as amount,
                floor(extract(epoch from s.settled_at) * 1000000)::bigint::text as micros
           from settle.settlements s
          where starts_with(s.tenant, $1) and s.settled_at > 'epoch'::timestamptz + $2::bigint * interval '1 microsecond'
          order by s.settled_at limit 1000`,
        [o.tenantPrefix, cursor.toString()],
      );
      let next = cursor;
      if (rows.length > 0) {
        await client.query(
          `insert into settle_sim.sim_rewards (consumer, tenant, key, status, credited, amount_cents)
           select $1, r.tenant, r.key, 'completed', true, r.amount
             from jsonb_to_recordset($2::jsonb) as r(tenant text, key text, amount bigint)`,
          [o.name, JSON.stringify(rows.map((r) => ({ tenant: r.tenant, key: r.key, amount: r.amount })))],
        );
        for (const row of rows) if (BigInt(row.micros) > next) next = BigInt(row.micros);
        await client.query(
          `insert into settle_sim.naive_cursors (consumer, settled_after)
           values ($1, 'epoch'::timestamptz + $2::bigint * interval '1 microsecond')
           on conflict (consumer) do update set settled_after = excluded.settled_after`,
          [o.name, next.toString()],
        );
      }
      await client.query('commit');
      cursor = next;
      stats.polls += 1;
      for (const waiter of waiters) {
        if (cursor > waiter.micros) {
          waiters.delete(waiter);
          waiter.resolve(true);
        }
      }
    } catch (error) {
      await client.query('rollback').catch(() => {});
      throw error;
    } finally {
      client.release();
    }
  };

  let current: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    if (stopped) return;
    current = current.then(() => (stopped ? undefined : poll().catch(o.onError)));
  }, o.intervalMs);

  return {
    stats,
    waitPast(micros, timeoutMs) {
      if (cursor > micros) return Promise.resolve(true);
      return new Promise((resolve) => {
        const waiter = {
          micros,
          resolve: (passed: boolean) => {
            clearTimeout(timeout);
            if (passed) stats.heldPast += 1;
            resolve(passed);
          },
        };
        const timeout = setTimeout(() => {
          waiters.delete(waiter);
          resolve(false);
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
    async finish() {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      await current;
      await poll().catch(o.onError);
      for (const waiter of waiters) waiter.resolve(false);
      waiters.clear();
    },
  };
}

// ---------------------------------------------------------------------------------------
// Read-back and tally
// ---------------------------------------------------------------------------------------

/** Every row the consumers of a run applied (consumer names start with the run's prefix). */
export async function readDeliveries(pool: pg.Pool, tenantPrefix: string): Promise<DeliveryRow[]> {
  const { rows } = await pool.query<{
    consumer: string;
    tenant: string;
    key: string;
    event_id: string | null;
    status: 'completed' | 'failed';
    credited: boolean;
    delivery_id: string;
  }>(
    `select consumer, tenant, key, event_id::text, status, credited, delivery_id::text
       from settle_sim.sim_rewards where starts_with(tenant, $1) order by delivery_id`,
    [tenantPrefix],
  );
  return rows.map((r) => ({
    consumer: r.consumer,
    tenant: r.tenant,
    key: r.key,
    eventId: r.event_id,
    status: r.status,
    credited: r.credited,
    deliveryId: r.delivery_id,
  }));
}

/** Credited / missing / twice for `consumer`, against the completed operations `completed` (keyOf keys). */
export function tallyConsumer(
  consumer: string,
  completed: ReadonlySet<string>,
  deliveries: readonly DeliveryRow[],
): ConsumerTally {
  const credits = new Map<string, number>();
  for (const row of deliveries) {
    if (row.consumer !== consumer || !row.credited) continue;
    const k = `${row.tenant}\u0000${row.key}`;
    credits.set(k, (credits.get(k) ?? 0) + 1);
  }
  let credited = 0;
  let missing = 0;
  let creditedTwice = 0;
  for (const k of completed) {
    const n = credits.get(k) ?? 0;
    if (n === 0) missing += 1;
    else credited += 1;
    if (n > 1) creditedTwice += 1;
  }
  return { consumer, payouts: completed.size, credited, missing, creditedTwice };
}
