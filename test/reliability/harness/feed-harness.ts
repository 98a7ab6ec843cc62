import type pg from 'pg';
import { mulberry32, type Prng } from '../../../src/shared/prng.js';
import {
  EMPTY_FEED,
  feedStep,
  undelivered,
  type FeedCall,
  type FeedEvent,
  type FeedWorld,
} from '../../../src/model/protocol-model.js';
import type { Step } from './model-driver.js';

/**
 * The settlement feed in the model-based test. Each sequence registers a consumer limited to its
 * two tenants (as the unbound admin login), read and acknowledged by a login granted
 * settle_consumer; steps reset it (to now, to a time, to '-infinity'), trim the feed, drop and
 * register it again, and read-and-acknowledge a batch in a transaction that commits or rolls
 * back. After every step the events the engine committed enter the feed model
 * (src/model/feed-model.ts), which judges every acknowledged batch; at the end of an episode and
 * of the sequence the consumer is drained, once the horizon has passed every event it must
 * receive, and must have received all of them. At the end of every sequence a login granted
 * settle_reconciler reads the views it is documented to read (docs/sql-api.md) and the consumer
 * login its feed_consumers rows: a refusal is a violation.
 */

export type FeedStep =
  | { readonly t: 'feed'; readonly action: 'read'; readonly commit: boolean }
  | { readonly t: 'feed'; readonly action: 'reset'; readonly to: 'now' | '-infinity' | 'mark' | 'event' }
  | { readonly t: 'feed'; readonly action: 'trim' }
  | { readonly t: 'feed'; readonly action: 'reregister'; readonly startAt: 'latest' | 'earliest' }
  /** Reads the database clock: a later reset `to: 'mark'` goes back to it. */
  | { readonly t: 'feed'; readonly action: 'mark' }
  | { readonly t: 'feed'; readonly action: 'drain' };

export interface FeedConnections {
  readonly consumer: pg.Client;
  readonly reconciler: pg.Client;
  readonly admin: pg.Client;
  readonly observer: pg.Client;
}

export interface FeedHost {
  /** Records a violation and stops the sequence. */
  fail(kind: string, detail: string): never;
  /** Whether an application transaction is open (it holds the horizon). */
  txOpen(): boolean;
}

export interface FeedFigures {
  reads: number;
  rolledBack: number;
  delivered: number;
  resets: number;
  trims: number;
  reregisters: number;
  drains: number;
}

interface StoredEvent extends FeedEvent {
  readonly occurredText: string;
  readonly positionXid: string;
}

const HORIZON_WAIT_MS = 60_000;

export class FeedHarness {
  readonly figures: FeedFigures = {
    reads: 0,
    rolledBack: 0,
    delivered: 0,
    resets: 0,
    trims: 0,
    reregisters: 0,
    drains: 0,
  };
  private world: FeedWorld = EMPTY_FEED;
  private stored = new Map<string, StoredEvent>();
  private name = '';
  private lanes = 1;
  private tenants: string[] = [];
  private rng: Prng | null = null;
  private steps = 0;
  private mark: string | null = null;
  private registered = false;

  constructor(
    private readonly c: FeedConnections,
    private readonly host: FeedHost,
  ) {}

  /** A new sequence: its consumer, limited to its tenants. `seed` drives generate() (null: a scripted sequence). */
  async begin(tag: string, tenants: readonly string[], seed: number | null): Promise<void> {
    this.world = EMPTY_FEED;
    this.stored = new Map();
    this.name = `${tag}-feed`;
    this.tenants = [...tenants];
    this.rng = seed === null ? null : mulberry32(seed ^ 0x5eed_feed);
    this.lanes = this.rng === null ? 1 : this.rng.int(1, 2);
    this.steps = 0;
    this.mark = null;
    await this.register('latest');
  }

  /** Feed steps for the random generator (undefined: none now). */
  generate(txOpen: boolean): Step | Step[] | undefined {
    const rng = this.rng;
    if (rng === null) return undefined;
    this.steps += 1;
    // A sequence may open with the interleaving a reset is about: an older transaction writes an
    // outcome and stays open, a younger one commits another, the consumer is reset to a time
    // before both (or to '-infinity' after a trim), then the older one commits.
    if (this.steps === 1 && rng.chance(0.4)) return this.resetRace(rng.chance(0.5) ? 'mark' : '-infinity');
    if (!rng.chance(0.14)) return undefined;
    const r = rng.next();
    if (r < 0.45) return { t: 'feed', action: 'read', commit: rng.chance(0.7) };
    if (r < 0.7) {
      const t = rng.next();
      return { t: 'feed', action: 'reset', to: t < 0.25 ? 'now' : t < 0.5 ? '-infinity' : t < 0.75 ? 'mark' : 'event' };
    }
    if (r < 0.8) return { t: 'feed', action: 'trim' };
    if (r < 0.88) return { t: 'feed', action: 'reregister', startAt: rng.chance(0.5) ? 'latest' : 'earliest' };
    if (r < 0.95) return { t: 'feed', action: 'mark' };
    return txOpen ? undefined : { t: 'feed', action: 'drain' };
  }

  private resetRace(to: 'mark' | '-infinity'): Step[] {
    const before: Step[] =
      to === '-infinity'
        ? [
            { t: 'feed', action: 'drain' },
            { t: 'feed', action: 'trim' },
          ]
        : [{ t: 'feed', action: 'mark' }];
    return [
      ...before,
      { t: 'begin', conn: 0 },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 1, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 1, ticket: 'latest' } },
      { t: 'feed', action: 'reset', to },
      { t: 'end', commit: true },
      { t: 'feed', action: 'drain' },
    ];
  }

  async run(s: FeedStep): Promise<void> {
    switch (s.action) {
      case 'mark': {
        const { rows } = await this.c.observer.query<{ t: string }>('select clock_timestamp()::text as t');
        this.mark = rows[0]?.t ?? null;
        return;
      }
      case 'read':
        return void (await this.readOnce(s.commit));
      case 'reset':
        return this.reset(s.to);
      case 'trim':
        return this.trim();
      case 'reregister':
        this.figures.reregisters += 1;
        await this.admin('select settle.drop_consumer(name => $1)', [this.name]);
        this.apply({ kind: 'drop', name: this.name });
        this.registered = false;
        return this.register(s.startAt);
      case 'drain':
        if (this.host.txOpen()) return;
        return this.drain();
    }
  }

  /** After every step: the events committed since enter the model. */
  async afterStep(): Promise<void> {
    const { rows } = await this.c.observer.query<{
      event_id: string;
      tenant: string;
      key: string;
      status: 'completed' | 'failed';
      occurred_us: string;
      occurred: string;
      position_xid: string;
    }>(
      `select e.event_id::text, e.tenant, e.key, e.status::text as status, (extract(epoch from e.occurred_at) * 1000000)::bigint::text as occurred_us,
              e.occurred_at::text as occurred, e.position_xid::text
         from settle_private.feed_events e where e.tenant = any($1::text[]) order by e.event_id`,
      [this.tenants],
    );
    const fresh: StoredEvent[] = [];
    for (const r of rows) {
      if (this.stored.has(r.event_id)) continue;
      const e: StoredEvent = {
        eventId: r.event_id,
        id: `${r.tenant}/${r.key}`,
        status: r.status,
        occurredAt: Number(r.occurred_us),
        occurredText: r.occurred,
        positionXid: r.position_xid,
      };
      this.stored.set(e.eventId, e);
      fresh.push(e);
    }
    if (fresh.length > 0) this.apply({ kind: 'committed', events: fresh });
  }

  /** The end of a sequence (no transaction open): drained, the views read, the consumer dropped. */
  async end(): Promise<void> {
    await this.afterStep();
    await this.drain();
    await this.readViews();
    await this.drop();
  }

  /** A sequence stopped by a violation: its consumer must not hold the feed back for the next. */
  async abandon(): Promise<void> {
    await this.drop().catch(() => {});
  }

  private async drop(): Promise<void> {
    if (this.name === '') return;
    await this.c.admin.query('select settle.drop_consumer(name => $1)', [this.name]);
    this.registered = false;
  }

  private async register(startAt: 'latest' | 'earliest'): Promise<void> {
    await this.admin(
      `select * from settle.register_consumer(name => $1, tenants => $2::text[], lanes => $3, start_at => $4)`,
      [this.name, this.tenants, this.lanes, startAt],
    );
    this.registered = true;
    this.apply({ kind: 'register', name: this.name, startAt });
  }

  private async reset(to: 'now' | '-infinity' | 'mark' | 'event'): Promise<void> {
    if (!this.registered) return;
    let text: string | null = null;
    let us: FeedCall & { kind: 'reset' } = { kind: 'reset', name: this.name, to: null };
    if (to === '-infinity') {
      text = '-infinity';
      us = { ...us, to: '-infinity' };
    } else if (to === 'mark' || to === 'event') {
      const retained = this.world.retained
        .map((e) => this.stored.get(e))
        .filter((e): e is StoredEvent => e !== undefined);
      const picked =
        to === 'event' && retained.length > 0
          ? retained[Math.floor((this.rng?.next() ?? 0) * retained.length)]
          : undefined;
      text = picked?.occurredText ?? this.mark;
      if (text === null) return;
      const { rows } = await this.c.observer.query<{ us: string }>(
        'select (extract(epoch from $1::timestamptz) * 1000000)::bigint::text as us',
        [text],
      );
      us = { ...us, to: Number(rows[0]?.us) };
    }
    this.figures.resets += 1;
    await this.admin('select * from settle.reset_consumer(name => $1, to_time => $2::timestamptz)', [this.name, text]);
    this.apply(us);
  }

  private async trim(): Promise<void> {
    this.figures.trims += 1;
    await this.admin('select settle.trim_feed(batch_size => 100000)', []);
    const { rows } = await this.c.observer.query<{ event_id: string }>(
      'select e.event_id::text from settle_private.feed_events e where e.tenant = any($1::text[])',
      [this.tenants],
    );
    this.apply({ kind: 'trim', retained: rows.map((r) => r.event_id) });
  }

  /** One batch read and acknowledged in a transaction of the consumer login; its size. */
  private async readOnce(commit: boolean): Promise<number> {
    if (!this.registered) return 0;
    const client = this.c.consumer;
    this.figures.reads += 1;
    await client.query('begin');
    try {
      const { rows } = await client.query<{
        event_id: string;
        tenant: string;
        lane: number;
        lease_token: string;
        position_xid: string;
      }>(
        `select event_id::text, tenant, lane, lease_token::text, position_xid::text
           from settle.read_feed(consumer => $1, batch_size => 100, lease => interval '1 hour')`,
        [this.name],
      );
      const last = rows.at(-1);
      if (last !== undefined) {
        const foreign = rows.filter((r) => !this.tenants.includes(r.tenant));
        if (foreign.length > 0)
          this.host.fail('feed-tenant', `${this.name} received events of ${foreign.map((r) => r.tenant).join(', ')}`);
        await client.query(
          'select settle.ack_feed(consumer => $1, lane => $2, lease_token => $3::uuid, position_xid => $4::xid8, event_id => $5::bigint)',
          [this.name, last.lane, last.lease_token, last.position_xid, last.event_id],
        );
      }
      await client.query(commit ? 'commit' : 'rollback');
      if (!commit) {
        this.figures.rolledBack += 1;
        return 0;
      }
      // The batch was read under the committed state: every event in it was seen by afterStep.
      await this.afterStep();
      this.apply({ kind: 'delivered', name: this.name, batch: rows.map((r) => r.event_id) });
      this.figures.delivered += rows.length;
      return rows.length;
    } catch (error) {
      await client.query('rollback').catch(() => {});
      if (error instanceof Error && 'code' in error) {
        this.host.fail(
          'feed-error',
          `read_feed/ack_feed as the consumer login: ${(error as { code?: string }).code} ${error.message}`,
        );
      }
      throw error;
    }
  }

  /**
   * Reads until the consumer has received every event it must. A read that finds nothing while
   * some remain waits for the horizon to pass them (it is cluster-wide: another test's open
   * transaction holds it), then reads again; nothing then is an event skipped.
   */
  private async drain(): Promise<void> {
    if (!this.registered) return;
    this.figures.drains += 1;
    await this.afterStep();
    for (let rounds = 0; ; rounds++) {
      while ((await this.readOnce(true)) > 0) {
        /* next batch */
      }
      const left = undelivered(this.world, this.name);
      if (left.length === 0) return;
      if (rounds > 0) {
        this.host.fail(
          'feed-skipped',
          `${this.name} never received ${left.map((e) => `event ${e.eventId} (${e.id}, ${e.status})`).join(', ')} although the horizon passed it`,
        );
      }
      const xids = left.map((e) => this.stored.get(e.eventId)?.positionXid ?? '0');
      const deadline = Date.now() + HORIZON_WAIT_MS;
      for (;;) {
        const { rows } = await this.c.observer.query<{ passed: boolean }>(
          'select pg_snapshot_xmin(pg_current_snapshot()) > (select max(x::xid8) from unnest($1::text[]) x) as passed',
          [xids],
        );
        if (rows[0]?.passed === true) break;
        if (Date.now() > deadline)
          this.host.fail('stuck', `the feed horizon did not pass ${xids.join(', ')} within ${HORIZON_WAIT_MS} ms`);
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  }

  /** The reconciler login reads the views it is documented to read; the consumer login its lanes. */
  private async readViews(): Promise<void> {
    for (const view of ['operations', 'attempts', 'audit_log', 'dead_letters']) {
      try {
        await this.c.reconciler.query(`select count(*) from settle.${view} v where v.tenant = any($1::text[])`, [
          this.tenants,
        ]);
      } catch (error) {
        this.host.fail(
          'view-denied',
          `settle_reconciler cannot read settle.${view}: ${(error as { code?: string }).code} ${(error as Error).message}`,
        );
      }
    }
    const mine = await this.c.reconciler.query<{ id: string; status: string }>(
      `select o.tenant || '/' || o.key as id, o.status::text as status from settle.operations o where o.tenant = any($1::text[]) order by 1`,
      [this.tenants],
    );
    const stored = await this.c.observer.query<{ id: string; status: string }>(
      `select o.tenant || '/' || o.key as id, o.status::text as status from settle_private.operations o where o.tenant = any($1::text[]) order by 1`,
      [this.tenants],
    );
    if (JSON.stringify(mine.rows) !== JSON.stringify(stored.rows)) {
      this.host.fail(
        'view-state',
        `settle.operations as settle_reconciler shows ${JSON.stringify(mine.rows)}, the table holds ${JSON.stringify(stored.rows)}`,
      );
    }
    try {
      const { rows } = await this.c.consumer.query<{ n: number }>(
        'select count(*)::int as n from settle.feed_consumers where consumer = $1',
        [this.name],
      );
      if (this.registered && rows[0]?.n !== this.lanes)
        this.host.fail(
          'view-state',
          `settle.feed_consumers shows ${rows[0]?.n} lanes of ${this.name}, not ${this.lanes}`,
        );
    } catch (error) {
      this.host.fail(
        'view-denied',
        `settle_consumer cannot read settle.feed_consumers: ${(error as { code?: string }).code} ${(error as Error).message}`,
      );
    }
  }

  private async admin(sql: string, params: unknown[]): Promise<void> {
    try {
      await this.c.admin.query(sql, params);
    } catch (error) {
      this.host.fail(
        'feed-error',
        `${sql.split('(')[0]} as the admin login: ${(error as { code?: string }).code} ${(error as Error).message}`,
      );
    }
  }

  private apply(call: FeedCall): void {
    const judged = feedStep(this.world, call);
    if (!judged.ok) this.host.fail(judged.violation, judged.detail);
    this.world = judged.world;
  }
}
