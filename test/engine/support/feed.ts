import type pg from 'pg';

/** Helpers over the feed API (settle.register_consumer, read_feed, ack_feed), as SQL. */

export interface FeedEventRow {
  consumer: string;
  lane: number;
  lease_token: string;
  lease_expires_at: Date;
  event_id: string;
  position_xid: string;
  tenant: string;
  key: string;
  status: 'completed' | 'failed';
  status_before: string;
  attempt: number;
  result: unknown;
  error: unknown;
  dead_letter_reason: string | null;
  redrive_count: number;
  occurred_at: Date;
}

/**
 * Waits until the feed's horizon has passed every transaction id assigned so far: then every
 * settlement committed before the call is readable, and a consumer registered at `latest`
 * starts after all of them. The horizon is cluster-wide (another test file's open transaction
 * holds it back), so this waits on the condition with a deadline, never for a duration.
 */
export async function waitForHorizon(client: pg.ClientBase, timeoutMs = 60_000): Promise<void> {
  const { rows } = await client.query<{ xid: string }>('select pg_current_xact_id()::text as xid');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const passed = await client.query<{ ok: boolean }>(
      'select pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8 as ok',
      [rows[0]?.xid],
    );
    if (passed.rows[0]?.ok === true) return;
    if (Date.now() > deadline)
      throw new Error(`waitForHorizon: the horizon did not pass xid ${rows[0]?.xid} within ${timeoutMs} ms`);
    await client.query('select pg_sleep(0.02)');
  }
}

/** Registers a consumer; at `latest` (default) after waiting for the horizon (waitForHorizon). */
export async function registerConsumer(
  admin: pg.ClientBase,
  name: string,
  options: { tenants?: readonly string[] | null; lanes?: number; startAt?: 'latest' | 'earliest' } = {},
): Promise<void> {
  if ((options.startAt ?? 'latest') === 'latest') await waitForHorizon(admin);
  await admin.query(
    `select * from settle.register_consumer(name => $1, tenants => $2::text[], lanes => $3, start_at => $4)`,
    [name, options.tenants ?? null, options.lanes ?? 1, options.startAt ?? 'latest'],
  );
}

export async function readFeed(
  client: pg.ClientBase,
  consumer: string,
  batchSize = 100,
  lease = '30 seconds',
): Promise<FeedEventRow[]> {
  const { rows } = await client.query<FeedEventRow>(
    `select * from settle.read_feed(consumer => $1, batch_size => $2, lease => $3::interval)`,
    [consumer, batchSize, lease],
  );
  return rows;
}

/** Acknowledges a whole batch (its last event); true when the lease was released. */
export async function ackFeed(
  client: pg.ClientBase,
  batch: readonly FeedEventRow[],
  upTo?: FeedEventRow,
): Promise<boolean> {
  const last = upTo ?? batch[batch.length - 1];
  if (last === undefined) throw new Error('ackFeed: empty batch');
  const { rows } = await client.query<{ ack_feed: boolean }>(
    `select settle.ack_feed(consumer => $1, lane => $2, lease_token => $3, position_xid => $4::xid8, event_id => $5)`,
    [last.consumer, last.lane, last.lease_token, last.position_xid, last.event_id],
  );
  return rows[0]?.ack_feed ?? false;
}

/** Reads, hands the batch to `apply` and acknowledges, all in one transaction of `client`. */
export async function consumeOnce(
  client: pg.ClientBase,
  consumer: string,
  apply: (batch: readonly FeedEventRow[]) => Promise<void>,
  batchSize = 100,
): Promise<FeedEventRow[]> {
  await client.query('begin');
  try {
    const batch = await readFeed(client, consumer, batchSize);
    if (batch.length > 0) {
      await apply(batch);
      await ackFeed(client, batch);
    }
    await client.query('commit');
    return batch;
  } catch (error) {
    await client.query('rollback').catch(() => {});
    throw error;
  }
}

/** Drains a consumer (one transaction per batch) and returns every event read, in order. */
export async function drain(client: pg.ClientBase, consumer: string, batchSize = 100): Promise<FeedEventRow[]> {
  const all: FeedEventRow[] = [];
  for (;;) {
    const batch = await consumeOnce(client, consumer, async () => {}, batchSize);
    if (batch.length === 0) return all;
    all.push(...batch);
  }
}

/**
 * Drains until `done(all events read so far)` holds. The horizon is cluster-wide: a transaction
 * of another test file (another database of the same server) that holds a transaction id keeps
 * this consumer's events back until it ends, so a drain may legitimately come back short. This
 * waits for that condition with a deadline; it never assumes a duration.
 */
export async function drainUntil(
  client: pg.ClientBase,
  consumer: string,
  done: (events: readonly FeedEventRow[]) => boolean,
  batchSize = 100,
  timeoutMs = 60_000,
): Promise<FeedEventRow[]> {
  const all: FeedEventRow[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    all.push(...(await drain(client, consumer, batchSize)));
    if (done(all)) return all;
    if (Date.now() > deadline) {
      throw new Error(`drainUntil(${consumer}): condition not met after ${timeoutMs} ms; read ${all.length} events`);
    }
    await client.query('select pg_sleep(0.02)');
  }
}

/** drainUntil every key of `keys` was read. */
export function drainKeys(
  client: pg.ClientBase,
  consumer: string,
  keys: readonly string[],
  batchSize = 100,
): Promise<FeedEventRow[]> {
  return drainUntil(client, consumer, (events) => keys.every((k) => events.some((e) => e.key === k)), batchSize);
}
