import pg from 'pg';
import { createSettleClient } from '../../src/client/index.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { checkpoint, type RunDatabase } from './database.js';
import { genericChecks, measurePgbench, measureWindow, perOp, scriptPath } from './measure.js';
import { percentile, runPgbench } from './pgbench.js';
import type { ScenarioContext } from './scenarios.js';
import type { RunResult } from './types.js';
import { auditOutcomes, check, completedOperations } from './verify.js';

/**
 * batch: settle.claim_many + settle.complete_many of BATCH_KEYS fresh keys per pgbench
 * transaction (bench/scripts/batch.sql). Reported in settled keys per second (pgbench's tps x
 * BATCH_KEYS), so `batch / stripe` compares keys settled per second with the Stripe pattern's
 * single-key rate in the same round. WAL per op is per key.
 */
export const BATCH_KEYS = 100;

/** A counted run's transactions per client, in batches: about a tenth as many (each is 100 keys). */
const batchLength = (ctx: ScenarioContext): ScenarioContext['opts']['length'] =>
  ctx.opts.length.kind === 'transactions'
    ? { kind: 'transactions', perClient: Math.max(2, Math.ceil(ctx.opts.length.perClient / 10)) }
    : ctx.opts.length;

async function inFreshDatabase<T>(ctx: ScenarioContext, hint: string, fn: (db: RunDatabase) => Promise<T>): Promise<T> {
  const db = await ctx.server.createRunDatabase(hint);
  try {
    return await fn(db);
  } finally {
    await db.drop();
  }
}

export function runBatch(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  if (ctx.pgbench === undefined) throw new Error('batch needs pgbench');
  const pgbench = ctx.pgbench;
  const length = batchLength(ctx);
  const warmup =
    ctx.opts.warmup === null
      ? null
      : ctx.opts.warmup.kind === 'transactions'
        ? { kind: 'transactions' as const, perClient: Math.max(1, Math.ceil(ctx.opts.warmup.perClient / 10)) }
        : ctx.opts.warmup;
  return inFreshDatabase(ctx, `batch_${clients}`, async (db) => {
    const run = await measurePgbench({
      pgbench,
      db,
      clients,
      threads: ctx.opts.threads,
      length,
      warmup,
      round,
      scenario: 'batch',
      label: 'batch',
      script: 'batch.sql',
      defines: { batch_keys: BATCH_KEYS },
      verify: async (client, processed) => {
        // Every processed transaction settled BATCH_KEYS operations, each once; a cut-off batch
        // leaves at most its BATCH_KEYS claimed keys unfinished.
        const completed = await completedOperations(client);
        const { rows } = await client.query<{ settled: string; doubly: string; unfinished: string }>(
          `select (select count(*) from settle.attempts where tenant = 'bench' and settled)::text as settled,
                  (select count(*) from (select 1 from settle.attempts where settled group by tenant, key having count(*) > 1) d)::text as doubly,
                  (select count(*) from settle_private.operations where status <> 'completed')::text as unfinished`,
        );
        const row = rows[0] ?? { settled: '0', doubly: '0', unfinished: '0' };
        const outcomes = await auditOutcomes(client, 'bench');
        const expected = processed.processed * BATCH_KEYS;
        const cutOff = processed.maxInFlight * BATCH_KEYS;
        return {
          counters: {
            completed,
            settledAttempts: Number(row.settled),
            unfinished: Number(row.unfinished),
            keysPerCall: BATCH_KEYS,
            ...outcomes,
          },
          checks: [
            check(
              'one settlement per completed operation',
              Number(row.settled) === completed,
              `${row.settled} settled attempts, ${completed} completed`,
            ),
            check(
              'no operation settled twice',
              row.doubly === '0',
              `${row.doubly} operations with more than one settled attempt`,
            ),
            check(
              'every batch settled its keys',
              completed >= expected && completed - expected <= cutOff,
              `${completed} completed for ${processed.processed} batches of ${BATCH_KEYS}`,
            ),
            check(
              'only acquired claims and settled completes',
              Object.keys(outcomes).every((k) => k === 'claim:acquired' || k === 'complete:settled'),
              JSON.stringify(outcomes),
            ),
          ],
        };
      },
    });
    return {
      ...run,
      tps: run.tps * BATCH_KEYS,
      walBytesPerOp: run.walBytesPerOp === null ? null : run.walBytesPerOp / BATCH_KEYS,
      fpiPerOp: run.fpiPerOp === null ? null : run.fpiPerOp / BATCH_KEYS,
      counters: { ...run.counters, batchesPerSecond: run.tps },
    };
  });
}

/** Settlements per second the feed-lag producer commits (pgbench -R over cycle.sql). */
export const FEED_RATE = 1_000;
export const FEED_LAG_P99_LIMIT_MS = 50;

/**
 * feedlag: while pgbench commits FEED_RATE settlements per second (cycle.sql, throttled with -R),
 * one consumer waits with LISTEN settle_feed + settle.await_feed and reads (read_feed) and
 * acknowledges (ack_feed) whatever is delivered. The lag of an event is the server's clock at
 * its delivery (clock_timestamp() in the read) minus its occurred_at (the settling statement's
 * clock, taken before its commit): an upper bound of the commit-to-delivery lag, one clock. Then
 * the backlog drain: BACKLOG settlements are committed with no consumer reading (claim_many +
 * complete_many), and the consumer drains them in batches of 1000; events per second is the
 * drain rate. Reported as a run whose tps is events delivered per second, p50/p99 the lag.
 * Beside it, a second registered consumer reads the same events through the typed client
 * (client.consume, transaction mode, its defaults): its lag (the handler's clock minus
 * occurred_at, the same machine's clock) is reported in the counters clientP50Ms / clientP99Ms.
 */
export function runFeedLag(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  if (ctx.pgbench === undefined) throw new Error('feedlag needs pgbench');
  const pgbench = ctx.pgbench;
  const seconds = ctx.opts.quick ? 4 : ctx.opts.length.kind === 'seconds' ? ctx.opts.length.seconds : 10;
  const backlog = ctx.opts.quick ? 5_000 : 20_000;
  return inFreshDatabase(ctx, `feedlag_${clients}`, async (db) => {
    await withPgClient(db.url, (admin) =>
      admin.query(`select settle.register_consumer(name => 'lag'), settle.register_consumer(name => 'lag-client')`),
    );
    await checkpoint(db.url);
    const consumer = await startConsumer(db.url);
    const typed = startClientConsumer(db.url);
    let producer;
    let window;
    try {
      ({ result: producer, window } = await measureWindow(db.url, () =>
        runPgbench({
          pgbench,
          url: db.url,
          script: scriptPath('cycle.sql'),
          clients,
          threads: ctx.opts.threads,
          protocol: 'prepared',
          maxTries: 3,
          durationS: seconds,
          rate: FEED_RATE,
        }),
      ));
      await consumer.drained(producer.output.processed);
      await typed.drained(producer.output.processed);
    } finally {
      await consumer.stop();
      await typed.stop();
    }
    const lags = consumer.lagsMs.slice(Math.floor(consumer.lagsMs.length / 10)); // the first tenth is start-up
    const clientLags = typed.lagsMs.slice(Math.floor(typed.lagsMs.length / 10));
    const drain = await measureDrain(db.url, backlog);
    const delivered = consumer.lagsMs.length;
    const completed = await withPgClient(db.url, completedOperations);
    const p99 = percentile(lags, 99);
    return {
      scenario: 'feedlag',
      label: 'feedlag',
      clients,
      round,
      driver: 'pgbench',
      durationS: producer.elapsedS,
      transactionsPerClient: null,
      warmupS: 0,
      tps: delivered / producer.elapsedS,
      processed: producer.output.processed,
      failed: producer.output.failed,
      retried: producer.output.retriedTransactions ?? 0,
      latencyAverageMs: lags.length === 0 ? null : lags.reduce((a, b) => a + b, 0) / lags.length,
      latencyStddevMs: null,
      p50Ms: percentile(lags, 50),
      p99Ms: p99,
      ...perOp(window, producer.output.processed),
      statements: [],
      counters: {
        producedPerSecond: producer.output.tps ?? 0,
        delivered,
        lagMaxMs: lags.length === 0 ? 0 : Math.max(...lags),
        backlog,
        drainEventsPerSecond: drain.eventsPerSecond,
        drainSeconds: drain.seconds,
        clientDelivered: typed.lagsMs.length,
        clientP50Ms: percentile(clientLags, 50) ?? 0,
        clientP99Ms: percentile(clientLags, 99) ?? 0,
      },
      checks: [
        ...genericChecks(producer.output.failed, producer.output.retriedTransactions ?? 0, window.deadlocks),
        check(
          'every settlement delivered once',
          delivered === producer.output.processed,
          `${delivered} delivered for ${producer.output.processed} settled`,
        ),
        check(
          'every settlement delivered once through the typed client',
          typed.lagsMs.length === producer.output.processed,
          `${typed.lagsMs.length} delivered for ${producer.output.processed} settled`,
        ),
        check('the backlog drained in full', drain.events === backlog, `${drain.events} of ${backlog}`),
        check('every operation completed', completed === producer.output.processed + backlog, `${completed} completed`),
      ],
    };
  });
}

interface Consumer {
  readonly lagsMs: number[];
  /** Resolves once `count` events were delivered (or after 30 s). */
  drained(count: number): Promise<void>;
  stop(): Promise<void>;
}

/** Read and acknowledge one batch; the lag of each event, by the server's clock. */
async function readBatch(client: pg.Client, batchSize: number): Promise<number[]> {
  const { rows } = await client.query<{
    lane: number;
    lease_token: string;
    position_xid: string;
    event_id: string;
    lag_ms: number;
  }>(
    `select e.lane, e.lease_token, e.position_xid::text as position_xid, e.event_id::text as event_id,
            extract(epoch from clock_timestamp() - e.occurred_at) * 1000 as lag_ms
       from settle.read_feed(consumer => 'lag', batch_size => $1) e`,
    [batchSize],
  );
  const last = rows[rows.length - 1];
  if (last !== undefined) {
    await client.query('select settle.ack_feed($1, $2, $3, $4::xid8, $5::bigint)', [
      'lag',
      last.lane,
      last.lease_token,
      last.position_xid,
      last.event_id,
    ]);
  }
  return rows.map((r) => Number(r.lag_ms));
}

/** Resolves once `count` lags are recorded (or after 30 s). */
async function untilDelivered(lagsMs: readonly number[], count: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (lagsMs.length < count && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

/** The waiting consumer: LISTEN settle_feed, registered with await_feed, reads on every wake-up. */
async function startConsumer(url: string): Promise<Consumer> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  await client.query('set role settle_consumer');
  await client.query('listen settle_feed');
  const lagsMs: number[] = [];
  let stopped = false;
  let wake: (() => void) | undefined;
  // A NOTIFY arrived that no read has answered yet.
  let pending = false;
  client.on('notification', () => {
    pending = true;
    wake?.();
  });
  let registeredAt = 0;
  const loop = (async () => {
    // After a NOTIFY the event may not be below the horizon yet (an older transaction is still
    // open, and its end sends no NOTIFY): read again after 1, 2, 4, 8 ms, then every 8 ms, for up
    // to a second; without a NOTIFY, wait for one (or poll after 100 ms).
    let retryMs = 0;
    let pollingMs = 0;
    while (!stopped) {
      if (Date.now() - registeredAt > 4_000) {
        await client.query(`select settle.await_feed(consumer => 'lag', seconds => 5)`);
        registeredAt = Date.now();
      }
      const announced = pending;
      pending = false;
      const lags = await readBatch(client, 1_000);
      lagsMs.push(...lags);
      if (lags.length > 0) {
        retryMs = 0;
        pollingMs = 0;
        continue;
      }
      if (announced || (retryMs > 0 && pollingMs < 1_000)) {
        retryMs = retryMs === 0 ? 1 : Math.min(8, retryMs * 2);
        pollingMs = announced ? retryMs : pollingMs + retryMs;
        await new Promise((resolve) => setTimeout(resolve, retryMs));
        continue;
      }
      retryMs = 0;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 100);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
        if (pending) wake();
      });
      wake = undefined;
    }
  })();
  return {
    lagsMs,
    drained: (count) => untilDelivered(lagsMs, count),
    async stop() {
      stopped = true;
      wake?.();
      await loop.catch(() => {});
      await client.end().catch(() => {});
    },
  };
}

/** The typed client's consumer (client.consume with its defaults) of 'lag-client'. */
function startClientConsumer(url: string): Consumer {
  const parsed = new URL(url);
  parsed.searchParams.set('options', '-c role=settle_consumer');
  const client = createSettleClient({ connectionString: parsed.toString() });
  const lagsMs: number[] = [];
  const controller = new AbortController();
  const done = client.consume(
    'lag-client',
    async (events) => {
      const now = Date.now();
      for (const e of events) lagsMs.push(now - e.occurredAt.getTime());
    },
    { signal: controller.signal, batchSize: 1_000 },
  );
  return {
    lagsMs,
    drained: (count) => untilDelivered(lagsMs, count),
    async stop() {
      controller.abort();
      await done.catch(() => {});
      await client.end();
    },
  };
}

/** Commits `backlog` settlements with nobody reading, then drains them: events per second. */
async function measureDrain(
  url: string,
  backlog: number,
): Promise<{ events: number; seconds: number; eventsPerSecond: number }> {
  await withPgClient(url, async (producer) => {
    for (let done = 0; done < backlog; done += 1_000) {
      const n = Math.min(1_000, backlog - done);
      const keys = Array.from({ length: n }, (_, i) => `drain-${done + i}`);
      await producer.query(
        `with c as (select * from settle.claim_many(tenant => 'bench', keys => $1::text[],
                      requests => array(select jsonb_build_object('n', g) from generate_series(1, $2::integer) g),
                      principal => 'bench-app'))
         select count(*) from settle.complete_many(tenant => 'bench', keys => $1::text[],
                  attempts => (select array_agg(c.attempt order by c.ordinal) from c),
                  lease_tokens => (select array_agg(c.lease_token order by c.ordinal) from c),
                  fingerprints => (select array_agg(c.fingerprint order by c.ordinal) from c),
                  principal => 'bench-app', scopes => '{}', binding_generation => 0,
                  results => array(select jsonb_build_object('ok', g) from generate_series(1, $2::integer) g))`,
        [keys, n],
      );
    }
  });
  return withPgClient(url, async (client) => {
    await client.query('set role settle_consumer');
    const started = process.hrtime.bigint();
    let events = 0;
    for (;;) {
      const lags = await readBatch(client, 1_000);
      if (lags.length === 0) break;
      events += lags.length;
    }
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    return { events, seconds, eventsPerSecond: events / seconds };
  });
}
