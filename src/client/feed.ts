import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { type DatabasePool, type QuerySqlToken, sql } from 'slonik';
import { z } from 'zod';
import { FeedLeaseLostError, mapDatabaseError, SettleInputError } from './errors.js';
import { validateRow, wasValidated } from './interceptors.js';
import { int8, status, timestamp } from './rows.js';
import type { ClientTelemetry } from './telemetry.js';
import type { ConsumeOptions, ConsumeSummary, FeedEvent, FeedHandler, Json } from './types.js';

// The settlement feed's consumer (docs/feed.md): read a batch of one lane (settle.read_feed),
// hand it to the handler, acknowledge it (settle.ack_feed). In `transaction` mode the three run in
// one transaction (exactly once for effects written through the handler's connection); in
// `external` mode the lease is committed and the handler runs outside any transaction (at least
// once: deduplicate downstream by eventId). When a read finds nothing the consumer waits for
// NOTIFY settle_feed (after settle.await_feed) or its backoff poll, whichever comes first.

const json = z.custom<Json>((value) => value !== undefined);

export const feedEventRow = z
  .object({
    consumer: z.string(),
    lane: z.number().int(),
    lease_token: z.string(),
    lease_expires_at: timestamp,
    event_id: int8,
    position_xid: z.union([z.string().regex(/^\d+$/), z.bigint(), z.number()]).transform(String),
    tenant: z.string(),
    key: z.string(),
    status: z.enum(['completed', 'failed']),
    status_before: status,
    attempt: z.number().int(),
    result: json.nullable(),
    error: json.nullable(),
    dead_letter_reason: z.string().nullable(),
    redrive_count: z.number().int(),
    occurred_at: timestamp,
  })
  .transform(
    (r): FeedEvent => ({
      eventId: r.event_id,
      position: r.position_xid,
      consumer: r.consumer,
      lane: r.lane,
      leaseToken: r.lease_token,
      leaseExpiresAt: r.lease_expires_at,
      tenant: r.tenant,
      key: r.key,
      status: r.status,
      statusBefore: r.status_before,
      attempt: r.attempt,
      result: r.result ?? null,
      error: r.error ?? null,
      deadLetterReason: r.dead_letter_reason,
      redriveCount: r.redrive_count,
      occurredAt: r.occurred_at,
    }),
  );

const ackRow = z.object({ released: z.boolean() });

const consumeOptionsSchema = z.object({
  batchSize: z.number().int().min(1).max(100_000).default(100),
  mode: z.enum(['transaction', 'external']).default('transaction'),
  leaseMs: z.number().int().min(1000).max(86_400_000).default(30_000),
  idleMs: z.number().int().min(1).max(60_000).default(100),
  maxIdleMs: z.number().int().min(1).max(60_000).default(2_000),
  errorBackoffMs: z.number().int().min(1).max(60_000).default(200),
});

const nameSchema = z.string().min(1).max(128);

/**
 * After a notification whose read found nothing, the event is not below the feed horizon yet
 * (an older transaction is still open, and its end sends no notification): the consumer looks
 * again after 1, 2, 4, 8 ms, then every 8 ms for a second, then doubling up to maxIdleMs, until
 * a read finds events.
 */
const HORIZON_RETRY_STEADY_MS = 8;
const HORIZON_RETRY_STEADY_FOR_MS = 1_000;

export interface FeedDependencies {
  readonly getPool: () => Promise<DatabasePool>;
  readonly telemetry: ClientTelemetry;
  /** For the NOTIFY listener: a plain pg connection (slonik has no LISTEN). */
  readonly connectionString: string | undefined;
}

function rowsOf<S extends z.ZodType>(query: QuerySqlToken<S>, raw: readonly unknown[]): z.output<S>[] {
  return raw.map((row) => (wasValidated(row) ? row : validateRow(query.parser, row, query.sql))) as z.output<S>[];
}

const readQuery = (consumer: string, batchSize: number, leaseMs: number) =>
  sql.type(feedEventRow)`select * from settle.read_feed(consumer => ${consumer}, batch_size => ${batchSize},
    lease => make_interval(secs => ${leaseMs}::float8 / 1000))`;

const ackQuery = (last: FeedEvent | null, consumer: string, lane: number, leaseToken: string) =>
  sql.type(ackRow)`select settle.ack_feed(consumer => ${consumer}, lane => ${lane}, lease_token => ${leaseToken}::uuid,
    position_xid => ${last === null ? null : last.position}::xid8, event_id => ${last === null ? null : String(last.eventId)}::bigint) as released`;

/** Consumes the feed of `name` until options.signal aborts; see ConsumeOptions. */
export async function consumeFeed(
  deps: FeedDependencies,
  name: string,
  handler: FeedHandler,
  options: ConsumeOptions = {},
): Promise<ConsumeSummary> {
  const consumer = parse(nameSchema, name, 'name');
  const o = parse(
    consumeOptionsSchema,
    {
      batchSize: options.batchSize,
      mode: options.mode,
      leaseMs: options.leaseMs,
      idleMs: options.idleMs,
      maxIdleMs: options.maxIdleMs,
      errorBackoffMs: options.errorBackoffMs,
    },
    'options',
  );
  const signal = options.signal ?? new AbortController().signal;
  const pool = await deps.getPool();
  const waker =
    options.wake !== false && deps.connectionString !== undefined
      ? new Waker(deps.connectionString, consumer, o.maxIdleMs)
      : null;
  let batches = 0;
  let events = 0;
  let errors = 0;
  let failures = 0;
  let idle = o.idleMs;
  let retryMs = 0; // the next horizon retry (see HORIZON_RETRY_STEADY_MS); 0: none running
  let retriedMs = 0;
  try {
    while (!signal.aborted) {
      // Listening and registered before the read; a notification from here on, during the read,
      // ends the next wait at once: the event it announces may have committed after the read's
      // snapshot.
      await waker?.arm();
      let count: number;
      try {
        count = await (o.mode === 'transaction' ? transactionBatch() : externalBatch());
        failures = 0;
      } catch (error) {
        const mapped = mapDatabaseError(error);
        errors += 1;
        failures += 1;
        options.onError?.(mapped);
        const backoff = Math.min(o.errorBackoffMs * 2 ** Math.min(failures - 1, 10), 30_000);
        await sleep(backoff, undefined, { signal }).catch(() => {}); // an abort only ends the wait
        continue;
      }
      if (count > 0) {
        batches += 1;
        events += count;
        idle = o.idleMs;
        retryMs = 0;
        continue;
      }
      const wait = retryMs > 0 ? retryMs : idle;
      const notified =
        waker === null
          ? (await sleep(wait, undefined, { signal }).catch(() => {}), false) // an abort only ends the wait
          : await waker.wait(wait, signal);
      if (notified) {
        // An outcome committed: read at once, and if it is not below the horizon yet, again soon.
        retryMs = 1;
        retriedMs = 0;
        idle = o.idleMs;
      } else if (retryMs > 0) {
        retriedMs += retryMs;
        const steady = retryMs >= HORIZON_RETRY_STEADY_MS && retriedMs < HORIZON_RETRY_STEADY_FOR_MS;
        retryMs = steady ? retryMs : Math.min(retryMs * 2, o.maxIdleMs);
      } else {
        idle = Math.min(idle * 2, o.maxIdleMs);
      }
    }
  } finally {
    await waker?.close();
  }
  return { batches, events, errors };

  async function transactionBatch(): Promise<number> {
    return pool.transaction(async (tx) => {
      const query = readQuery(consumer, o.batchSize, o.leaseMs);
      const batch = rowsOf(query, (await tx.query(query)).rows);
      const first = batch[0];
      if (first === undefined) return 0;
      await deps.telemetry.feedBatch(consumer, batch, () =>
        handler(batch, { consumer, lane: first.lane, connection: tx, signal }),
      );
      const ack = ackQuery(batch[batch.length - 1] ?? null, consumer, first.lane, first.leaseToken);
      await tx.query(ack);
      options.onBatch?.(batch);
      return batch.length;
    });
  }

  async function externalBatch(): Promise<number> {
    const query = readQuery(consumer, o.batchSize, o.leaseMs);
    const batch = rowsOf(query, (await pool.query(query)).rows);
    const first = batch[0];
    if (first === undefined) return 0;
    try {
      await deps.telemetry.feedBatch(consumer, batch, () =>
        handler(batch, { consumer, lane: first.lane, connection: null, signal }),
      );
    } catch (error) {
      // Release the lease at once: the batch is delivered again (to this or another process).
      await pool.query(ackQuery(null, consumer, first.lane, first.leaseToken)).catch(() => {});
      throw error;
    }
    try {
      await pool.query(ackQuery(batch[batch.length - 1] ?? null, consumer, first.lane, first.leaseToken));
    } catch (error) {
      const mapped = mapDatabaseError(error);
      // The lease lapsed and another process took the lane: it delivers these events again.
      if (mapped instanceof FeedLeaseLostError) throw mapped;
      throw error;
    }
    options.onBatch?.(batch);
    return batch.length;
  }
}

function parse<S extends z.ZodType>(schema: S, value: unknown, path: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((issue) => ({ path: [path, ...issue.path], message: issue.message }));
  throw new SettleInputError(`invalid ${path}: ${issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, {
    code: 'INVALID_INPUT',
    issues,
  });
}

/**
 * LISTEN settle_feed on a dedicated connection, registered as a waiter (settle.await_feed) so
 * that settlements notify, from before the first read on. The registration is renewed when half
 * of it has passed, not at every wait (the horizon retries wait a few milliseconds). A
 * notification that arrives while the consumer reads is kept for the next wait (`arm`, before
 * each read, starts the window). A broken listener is reconnected at the next read or wait;
 * meanwhile the poll still runs, so correctness never depends on it.
 */
class Waker {
  private client: pg.Client | null = null;
  private connecting: Promise<pg.Client | null> | null = null;
  private wake: (() => void) | null = null;
  private pending = false;
  private registeredUntil = 0;
  private closed = false;
  private readonly seconds: number;

  constructor(
    private readonly connectionString: string,
    private readonly consumer: string,
    maxIdleMs: number,
  ) {
    this.seconds = Math.min(60, Math.max(1, Math.ceil((maxIdleMs * 2) / 1000)));
  }

  private connect(): Promise<pg.Client | null> {
    if (this.client !== null) return Promise.resolve(this.client);
    this.connecting ??= (async () => {
      const client = new pg.Client({ connectionString: this.connectionString, application_name: 'pg-settle feed' });
      client.on('error', () => {
        if (this.client === client) this.drop(client);
      });
      client.on('notification', () => {
        this.pending = true;
        this.wake?.();
      });
      try {
        await client.connect();
        await client.query('listen settle_feed');
        if (this.closed) {
          await client.end().catch(() => {});
          return null;
        }
        this.client = client;
        return client;
      } catch {
        await client.end().catch(() => {});
        return null;
      } finally {
        this.connecting = null;
      }
    })();
    return this.connecting;
  }

  private drop(client: pg.Client): void {
    this.client = null;
    this.registeredUntil = 0;
    void client.end().catch(() => {});
  }

  private async register(): Promise<void> {
    const client = await this.connect();
    // Renewed while at least half of the registration is left, so none lapses during a wait.
    if (client === null || Date.now() < this.registeredUntil - (this.seconds * 1000) / 2) return;
    await client
      .query('select settle.await_feed(consumer => $1, seconds => $2)', [this.consumer, this.seconds])
      .then(() => {
        this.registeredUntil = Date.now() + this.seconds * 1000;
      })
      .catch(() => this.drop(client));
  }

  /** Listens and is registered; notifications from now on end the next wait. */
  async arm(): Promise<void> {
    await this.register();
    this.pending = false;
  }

  /** Waits up to `ms`; true when a notification since `arm` ended (or skipped) the wait. */
  async wait(ms: number, signal: AbortSignal): Promise<boolean> {
    await this.register();
    if (this.pending) return true;
    const woken = new Promise<void>((resolve) => {
      this.wake = resolve;
    });
    await Promise.race([woken, sleep(ms, undefined, { signal })]).catch(() => {}); // an abort only ends the wait
    this.wake = null;
    return this.pending;
  }

  async close(): Promise<void> {
    this.closed = true;
    const client = this.client;
    this.client = null;
    await client?.end().catch(() => {});
  }
}
