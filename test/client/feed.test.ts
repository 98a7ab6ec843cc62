import pg from 'pg';
import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { FeedConsumerNotFoundError, type FeedEvent, SettleInputError } from '../../src/index.js';
import { binding, someoneWaitsOnLock, uniqueKey, useClientTest, waitFor } from './helpers.js';

// The typed consumer (client.consume, docs/feed.md) against real PostgreSQL, as the
// settle_consumer role: exactly once into a ledger table in the same database, several
// processes sharing a consumer, at least once in external mode, fast wake, graceful shutdown.
const t = useClientTest('client_feed');

async function settleOne(amount: number): Promise<string> {
  const key = uniqueKey('pay');
  const outcome = await t.app.run({ tenant: 'acme', key, request: { amount }, binding }, async () => ({ amount }));
  expect(outcome.outcome).toBe('completed');
  return key;
}

async function registerConsumer(name: string, lanes = 1): Promise<void> {
  await t.su.query(`select settle.register_consumer(name => $1, lanes => $2)`, [name, lanes]);
}

async function ledgerTable(): Promise<string> {
  const table = `ledger_${uniqueKey('t').replace(/-/g, '_')}`;
  await t.su.query(`create table ${table} (event_id bigint primary key, key text not null, amount numeric not null)`);
  await t.su.query(`grant insert, select on ${table} to settle_consumer`);
  return table;
}

describe('client.consume', () => {
  it('transaction mode: each completed payout is credited exactly once by two racing processes; abort stops them cleanly', async () => {
    const name = uniqueKey('ledger');
    await registerConsumer(name, 2);
    const table = await ledgerTable();
    const keys: string[] = [];
    for (let i = 1; i <= 30; i += 1) keys.push(await settleOne(i));

    const controller = new AbortController();
    const seen: FeedEvent[] = [];
    const handler = async (
      events: readonly FeedEvent[],
      context: { connection: { query: (q: ReturnType<typeof sql.unsafe>) => Promise<unknown> } | null },
    ) => {
      for (const e of events) {
        if (e.status !== 'completed') continue;
        // A duplicate would violate the primary key and fail the test through onError.
        await context.connection?.query(
          sql.unsafe`insert into ${sql.identifier([table])} (event_id, key, amount) values (${String(e.eventId)}, ${e.key}, ${String((e.result as { amount: number }).amount)})`,
        );
      }
      seen.push(...events);
    };
    const errors: Error[] = [];
    const processes = [1, 2].map(() =>
      t.client({ role: 'settle_consumer' }).consume(name, handler, {
        batchSize: 7,
        signal: controller.signal,
        onError: (error) => errors.push(error),
        idleMs: 20,
        maxIdleMs: 200,
      }),
    );
    await waitFor(async () => {
      const { rows } = await t.su.query<{ n: number }>(`select count(*)::int as n from ${table} where key = any($1)`, [
        keys,
      ]);
      return rows[0]?.n === keys.length;
    }, 60_000);
    controller.abort();
    const summaries = await Promise.all(processes);
    expect(errors).toEqual([]);
    const { rows } = await t.su.query<{ key: string; n: number }>(
      `select key, count(*)::int as n from ${table} group by key`,
    );
    expect(rows.filter((r) => keys.includes(r.key))).toHaveLength(keys.length);
    expect(rows.every((r) => r.n === 1)).toBe(true);
    expect(summaries.reduce((n, s) => n + s.events, 0)).toBe(seen.length);
    // Typed events: bigint ids, dates, the settled attempt.
    const one = seen.find((e) => e.key === keys[0]);
    expect(one).toMatchObject({ tenant: 'acme', status: 'completed', attempt: 1, result: { amount: 1 } });
    expect(typeof one?.eventId).toBe('bigint');
    expect(one?.occurredAt).toBeInstanceOf(Date);
  });

  it('a failing handler rolls its batch back; the batch is delivered again', async () => {
    const name = uniqueKey('retry');
    await registerConsumer(name);
    const key = await settleOne(5);
    const controller = new AbortController();
    let calls = 0;
    const delivered: bigint[] = [];
    const errors: Error[] = [];
    const done = t.client({ role: 'settle_consumer' }).consume(
      name,
      async (events) => {
        calls += 1;
        if (calls === 1) throw new Error('downstream down');
        delivered.push(...events.filter((e) => e.key === key).map((e) => e.eventId));
      },
      { signal: controller.signal, onError: (e) => errors.push(e), errorBackoffMs: 10, idleMs: 20, maxIdleMs: 100 },
    );
    await waitFor(async () => delivered.length > 0, 60_000);
    controller.abort();
    await done;
    expect(errors.map((e) => e.message)).toEqual(['downstream down']);
    expect(delivered).toHaveLength(1);
  });

  it('external mode: a failed handler releases the lease at once and the events come again (at least once, same eventId)', async () => {
    const name = uniqueKey('hook');
    await registerConsumer(name);
    const key = await settleOne(9);
    const controller = new AbortController();
    const ids: bigint[] = [];
    let failed = false;
    const done = t.client({ role: 'settle_consumer' }).consume(
      name,
      async (events, context) => {
        expect(context.connection).toBeNull();
        const mine = events.filter((e) => e.key === key);
        ids.push(...mine.map((e) => e.eventId));
        if (!failed && mine.length > 0) {
          failed = true;
          throw new Error('webhook timed out');
        }
      },
      {
        mode: 'external',
        signal: controller.signal,
        errorBackoffMs: 10,
        idleMs: 20,
        maxIdleMs: 100,
        onError: () => {},
      },
    );
    await waitFor(async () => ids.length >= 2, 60_000);
    controller.abort();
    await done;
    expect(ids[0]).toBe(ids[1]);
  });

  it('fast wake: a waiting consumer receives a new settlement long before its idle poll would', async () => {
    const name = uniqueKey('wake');
    await registerConsumer(name);
    const controller = new AbortController();
    const arrivals = new Map<string, number>();
    let reads = 0;
    const done = t.client({ role: 'settle_consumer' }).consume(
      name,
      async (events) => {
        for (const e of events) arrivals.set(e.key, Date.now());
      },
      { signal: controller.signal, idleMs: 60_000, maxIdleMs: 60_000, onBatch: () => (reads += 1) },
    );
    // Let it settle into its wait (registered as a waiter, listening).
    await waitFor(async () => {
      const { rows } = await t.su.query<{ n: number }>(
        `select count(*)::int as n from settle_private.feed_waiters where consumer = $1`,
        [name],
      );
      return (rows[0]?.n ?? 0) > 0;
    });
    const started = Date.now();
    const key = await settleOne(1);
    await waitFor(async () => arrivals.has(key), 60_000);
    const latency = (arrivals.get(key) ?? 0) - started;
    controller.abort();
    await done;
    // The poll would come after 60 s; the notification brings it in well under that (~100 ms
    // on an idle machine). The bound leaves headroom for a loaded CI machine and for another
    // test file's open transaction holding the cluster-wide horizon back for a while.
    expect(latency).toBeLessThan(30_000);
    expect(reads).toBeGreaterThan(0);
  });

  it('a notification that arrives while a read finds nothing ends the next wait at once', async () => {
    // The consumer's first read fixes its horizon, then waits behind a lock on the lanes; a
    // settlement commits (and notifies) meanwhile, so the read returns nothing: the settlement
    // is above its horizon. The idle poll is 60 s away: only the notification kept from the
    // read (and the registration as a waiter before the first read) brings the event.
    const name = uniqueKey('kept');
    await registerConsumer(name);
    const holder = new pg.Client({ connectionString: t.db.url });
    holder.on('error', () => {});
    await holder.connect();
    const controller = new AbortController();
    const arrivals = new Set<string>();
    let done: Promise<unknown> = Promise.resolve();
    try {
      await holder.query('begin');
      await holder.query('lock table settle_private.feed_lanes in access exclusive mode');
      done = t.client({ role: 'settle_consumer' }).consume(
        name,
        async (events) => {
          for (const e of events) arrivals.add(e.key);
        },
        { signal: controller.signal, idleMs: 60_000, maxIdleMs: 60_000 },
      );
      await waitFor(() => someoneWaitsOnLock(t.su));
      const waiters = await t.su.query<{ n: number }>(
        'select count(*)::int as n from settle_private.feed_waiters where consumer = $1',
        [name],
      );
      expect(waiters.rows[0]?.n).toBe(1);
      const key = await settleOne(1);
      await holder.query('rollback');
      // The bound is half the idle poll: without the kept notification the event comes at 60 s.
      await waitFor(async () => arrivals.has(key), 30_000);
    } finally {
      controller.abort();
      await done;
      await holder.end().catch(() => {});
    }
  });

  it('bad input and an unknown consumer are typed errors', async () => {
    const client = t.client({ role: 'settle_consumer' });
    await expect(client.consume('x', async () => {}, { batchSize: 0 })).rejects.toBeInstanceOf(SettleInputError);
    const errors: Error[] = [];
    const controller = new AbortController();
    const done = client.consume('no-such-consumer', async () => {}, {
      signal: controller.signal,
      onError: (e) => {
        errors.push(e);
        controller.abort();
      },
    });
    await done;
    expect(errors[0]).toBeInstanceOf(FeedConsumerNotFoundError);
  });
});
