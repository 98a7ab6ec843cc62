import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { asAdmin, uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import {
  ackFeed,
  consumeOnce,
  drain,
  drainKeys,
  drainUntil,
  type FeedEventRow,
  readFeed,
  registerConsumer,
  waitForHorizon,
} from './support/feed.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, complete, fail, redrive } from './support/settle.js';

// The settlement feed. Every final outcome reaches every consumer exactly once, in a
// commit-safe order, whatever order the settling transactions commit in. Producers run as
// settle_app, consumers as login roles holding settle_consumer, the admin as settle_admin.
const db = useEngineDatabase('feed');
const loginRole = useLoginRoles(db);

async function admin(): Promise<pg.Client> {
  const client = await db.connect();
  await asAdmin(client);
  return client;
}

async function consumerSession(): Promise<pg.Client> {
  return (await loginRole('feed', ['settle_consumer'])).connect();
}

/** Claims and completes a fresh key on `client` (in whatever transaction it is in). */
async function settle(client: pg.ClientBase, prefix: string, amount = 1): Promise<string> {
  const op = newOperation(prefix);
  const ticket = await acquire(client, op);
  const answer = await complete(client, ticket, { credited: amount });
  expect(answer.outcome).toBe('settled');
  return op.key as string;
}

function keysOf(events: readonly FeedEventRow[]): string[] {
  return events.map((e) => e.key);
}

describe('settlement feed', () => {
  it('regression: a settlement that commits after a later one is delivered; a settled_at cursor loses it', async () => {
    const ops = await admin();
    const name = uniqueKey('ledger');
    await registerConsumer(ops, name);
    const s1 = await db.app();
    const s2 = await db.app();
    const reader = await consumerSession();
    const naive = await db.connect();

    // S1: begin; claim + complete key A; (held open) -- meanwhile B settles and commits.
    await s1.query('begin');
    const a = await settle(s1, 'a');
    const b = await settle(s2, 'b');

    // The naive poller stores max(settled_at) = B's.
    const seen1 = await naive.query<{ key: string; settled_at: string }>(
      `select key, settled_at::text from settle.settlements where key = any($1) order by settled_at`,
      [[a, b]],
    );
    expect(seen1.rows.map((r) => r.key)).toEqual([b]);
    const cursor = seen1.rows[0]?.settled_at;

    // The feed holds B back while A's older transaction is open: nothing can commit behind it.
    expect(await drain(reader, name)).toEqual([]);
    await s1.query('commit');

    const seen2 = await naive.query(
      `select key from settle.settlements where key = any($1) and settled_at > $2::timestamptz`,
      [[a, b], cursor],
    );
    expect(seen2.rows, 'the settled_at cursor never sees A').toEqual([]);
    const delivered = await drainKeys(reader, name, [a, b]);
    expect(keysOf(delivered).sort()).toEqual([a, b].sort());
    expect(delivered.every((e) => e.status === 'completed' && e.status_before === 'running' && e.attempt === 1)).toBe(
      true,
    );
    expect(await drain(reader, name), 'nothing twice').toEqual([]);
  });

  it('racing producers commit in the reverse order of their start: every event once, none skipped', async () => {
    const ops = await admin();
    const name = uniqueKey('rev');
    await registerConsumer(ops, name);
    const reader = await consumerSession();
    const producers = await Promise.all([1, 2, 3, 4].map(() => db.app()));
    const keys: string[] = [];
    for (const p of producers) {
      await p.query('begin');
      keys.push(await settle(p, 'rev'));
    }
    const delivered: FeedEventRow[] = [];
    // Commit the youngest first; read after each commit.
    for (const p of [...producers].reverse()) {
      await p.query('commit');
      delivered.push(...(await drain(reader, name)));
    }
    delivered.push(
      ...(await drainKeys(
        reader,
        name,
        keys.filter((k) => !delivered.some((e) => e.key === k)),
      )),
    );
    expect(keysOf(delivered).sort()).toEqual([...keys].sort());
    expect(new Set(delivered.map((e) => e.event_id)).size).toBe(keys.length);
  });

  it('failed outcomes flow too, and a key keeps its order even when its later outcome has the older transaction id', async () => {
    const ops = await admin();
    const name = uniqueKey('order');
    await registerConsumer(ops, name);
    const reader = await consumerSession();
    const older = await db.app();
    const younger = await db.app();
    const op = newOperation('ord', { max_attempts: 1 });

    // `older` takes a transaction id first (it settles another key, uncommitted).
    await older.query('begin');
    const other = await settle(older, 'other');
    // `younger` (a larger transaction id) fails the key: every attempt failed, dead letter.
    const ticket = await acquire(younger, op);
    expect((await fail(younger, ticket, { code: 'declined' }, true)).status).toBe('failed');
    // In `older` the key is redriven, claimed and completed: its second outcome, written by
    // the transaction with the smaller id.
    await asAdmin(older);
    await redrive(older, { tenant: op.tenant as string, key: op.key as string, additional_attempts: 1 });
    await older.query('set role settle_app');
    const second = await acquire(older, op);
    expect((await complete(older, second, { ok: true })).outcome).toBe('settled');
    await older.query('commit');

    const delivered = (await drainUntil(reader, name, (all) => all.filter((e) => e.key === op.key).length >= 2)).filter(
      (e) => e.key === op.key,
    );
    expect(delivered.map((e) => [e.status, e.attempt, e.redrive_count])).toEqual([
      ['failed', 1, 0],
      ['completed', 2, 1],
    ]);
    expect(delivered[0]?.error).toEqual({ code: 'declined' });
    expect(delivered[0]?.dead_letter_reason).toBe('attempts_exhausted');
    expect(BigInt(delivered[1]?.event_id ?? 0)).toBeGreaterThan(BigInt(delivered[0]?.event_id ?? 0));
    expect(other).toBeTruthy();
  });

  it('two processes of one consumer race: a lane is read by one process at a time, never an event twice', async () => {
    const ops = await admin();
    const name = uniqueKey('pair');
    await registerConsumer(ops, name, { lanes: 2 });
    const app = await db.app();
    const keys: string[] = [];
    for (let i = 0; i < 40; i += 1) keys.push(await settle(app, 'pair', i));
    const one = await consumerSession();
    const two = await consumerSession();
    // Wait until every event is below the horizon (see drainUntil), then reset to re-read them.
    await drainKeys(one, name, keys, 1000);
    await ops.query(`select * from settle.reset_consumer(name => $1, to_time => '-infinity')`, [name]);

    // Both inside open transactions: each holds the lane it read until it commits.
    await one.query('begin');
    await two.query('begin');
    const b1 = await readFeed(one, name, 1000);
    const b2 = await readFeed(two, name, 1000);
    expect(b1.length).toBeGreaterThan(0);
    expect(b2.length).toBeGreaterThan(0);
    expect(b1[0]?.lane).not.toBe(b2[0]?.lane);
    // Neither finds a third batch: both lanes are held.
    expect(await readFeed(one, name, 1000)).toEqual([]);
    await ackFeed(one, b1);
    await ackFeed(two, b2);
    await one.query('commit');
    await two.query('commit');
    const all = [...b1, ...b2];
    expect(
      keysOf(all)
        .filter((k) => keys.includes(k))
        .sort(),
    ).toEqual([...keys].sort());
    expect(new Set(all.map((e) => e.event_id)).size).toBe(all.length);
    expect(await drain(one, name)).toEqual([]);
  });

  it('a consumer killed mid-batch: its transaction rolls back and another process gets the same events', async () => {
    const ops = await admin();
    const name = uniqueKey('kill');
    await registerConsumer(ops, name);
    const app = await db.app();
    const keys = [await settle(app, 'kill'), await settle(app, 'kill')];
    // Both settlements below the horizon (another test file's open transaction can hold it back).
    await waitForHorizon(app);
    const victim = await consumerSession();
    const survivor = await consumerSession();
    const killer = await db.connect();

    await victim.query('begin');
    const batch = await readFeed(victim, name);
    expect(keysOf(batch).sort()).toEqual([...keys].sort());
    // The survivor cannot take the lane while the victim's transaction holds it.
    expect(await readFeed(survivor, name)).toEqual([]);
    const pid = (await victim.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
    await killer.query('select pg_terminate_backend($1)', [pid]);
    await expect(victim.query('select 1')).rejects.toThrow();

    // The lock went with the backend; the lease update was rolled back with its transaction.
    let again: FeedEventRow[] = [];
    const deadline = Date.now() + 30_000;
    while (again.length === 0 && Date.now() < deadline) {
      again = await consumeOnce(survivor, name, async () => {});
    }
    expect(keysOf(again).sort()).toEqual([...keys].sort());
    expect(again.map((e) => e.event_id)).toEqual(batch.map((e) => e.event_id));
  });

  it('outside a transaction the lease is committed: a dead holder is replaced after it lapses and its late ack is fenced (SE042)', async () => {
    const ops = await admin();
    const name = uniqueKey('lease');
    await registerConsumer(ops, name);
    const app = await db.app();
    const key = await settle(app, 'lease');
    await waitForHorizon(app);
    const first = await consumerSession();
    const second = await consumerSession();

    const stale = await readFeed(first, name, 10, '1 second');
    expect(keysOf(stale)).toEqual([key]);
    // Until the lease lapses no one else reads the lane (the database clock decides).
    let taken: FeedEventRow[] = [];
    const deadline = Date.now() + 30_000;
    while (taken.length === 0 && Date.now() < deadline) {
      taken = await readFeed(second, name, 10);
      if (taken.length === 0) await second.query('select pg_sleep(0.05)');
    }
    expect(taken.map((e) => e.event_id)).toEqual(stale.map((e) => e.event_id));
    expect(await sqlStateOf(ackFeed(first, stale))).toBe('SE042');
    expect(await ackFeed(second, taken)).toBe(true);
    expect(await drain(second, name)).toEqual([]);
  });

  it('reset: a dry run reports, a reset re-delivers retained events and fences the old lease', async () => {
    const ops = await admin();
    const name = uniqueKey('reset');
    await registerConsumer(ops, name);
    const app = await db.app();
    const keys = [await settle(app, 'reset'), await settle(app, 'reset')];
    const reader = await consumerSession();
    const firstPass = await drainKeys(reader, name, keys);
    expect(keysOf(firstPass).sort()).toEqual([...keys].sort());
    const held = await readFeed(reader, name);
    expect(held).toEqual([]);

    const since = firstPass[0]?.occurred_at;
    const dry = await ops.query(`select * from settle.reset_consumer(name => $1, to_time => $2, dry_run => true)`, [
      name,
      since,
    ]);
    expect(dry.rows).toHaveLength(1);
    expect(dry.rows[0]).toMatchObject({ events_to_deliver: '2', applied: false });
    expect(await drain(reader, name), 'a dry run changes nothing').toEqual([]);

    const lease = await readFeed(reader, name); // nothing to lease yet
    expect(lease).toEqual([]);
    await ops.query(`select * from settle.reset_consumer(name => $1, to_time => $2)`, [name, since]);
    const leased = await readFeed(reader, name, 1);
    expect(leased).toHaveLength(1);
    await ops.query(`select * from settle.reset_consumer(name => $1, to_time => '-infinity')`, [name]);
    expect(await sqlStateOf(ackFeed(reader, leased)), 'the reset fenced the old lease').toBe('SE042');
    const again = await drainKeys(reader, name, keys);
    expect(
      keysOf(again)
        .filter((k) => keys.includes(k))
        .sort(),
    ).toEqual([...keys].sort());
    const log = await ops.query(
      `select event, detail from settle.admin_log where detail->>'consumer' = $1 order by log_id`,
      [name],
    );
    expect(log.rows.map((r: { event: string }) => r.event)).toEqual([
      'register_consumer',
      'reset_consumer',
      'reset_consumer',
    ]);
    // Reset to now skips everything committed below the horizon. The horizon is cluster-wide
    // (another test file's open transaction holds it back, and the lane never goes above it), so
    // wait until it has passed the settlement first.
    await settle(app, 'skipped');
    await waitForHorizon(ops);
    await ops.query(`select * from settle.reset_consumer(name => $1)`, [name]);
    expect(await drain(reader, name)).toEqual([]);
  });

  it('purge racing a slow consumer: the outcome stays in the feed until every consumer acknowledged it', async () => {
    const ops = await admin();
    // Only this test's consumers hold events back.
    await ops.query(
      'select settle.drop_consumer(consumer) from (select distinct consumer from settle.feed_consumers) c',
    );
    const slow = uniqueKey('slow');
    const fast = uniqueKey('fast');
    await registerConsumer(ops, slow);
    await registerConsumer(ops, fast);
    const app = await db.app();
    const key = await settle(app, 'purged');
    const reader = await consumerSession();
    expect(keysOf(await drainKeys(reader, fast, [key]))).toContain(key);

    let batch: FeedEventRow[] = [];
    while (!keysOf(batch).includes(key)) {
      if (batch.length > 0) await ackFeed(reader, batch);
      batch = await readFeed(reader, slow); // the slow consumer holds the lease...
      if (batch.length === 0) await reader.query('select pg_sleep(0.02)');
    }
    expect(keysOf(batch)).toContain(key);
    await ops.query(`select settle.set_purge_min_retention(interval '0')`);
    const purged = await ops.query<{ purge: number }>(`select settle.purge(older_than => interval '0')`);
    expect(purged.rows[0]?.purge).toBeGreaterThan(0);
    await ops.query(`select settle.trim_feed()`);
    // ... the operation is gone, its outcome is not: the slow consumer still has it.
    await ackFeed(reader, batch);
    const events = await db.connect();
    const left = await events.query(`select count(*)::int as n from settle_private.feed_events where key = $1`, [key]);
    expect(left.rows[0]?.n).toBe(1);
    // Once both acknowledged, trim removes it; a dropped consumer holds nothing back.
    const late = uniqueKey('late');
    await registerConsumer(ops, late, { startAt: 'earliest' });
    await ops.query(`select settle.trim_feed()`);
    expect(
      (await events.query(`select count(*)::int as n from settle_private.feed_events where key = $1`, [key])).rows[0]
        ?.n,
    ).toBe(1);
    await ops.query(`select settle.drop_consumer($1)`, [late]);
    await ops.query(`select settle.trim_feed()`);
    expect(
      (await events.query(`select count(*)::int as n from settle_private.feed_events where key = $1`, [key])).rows[0]
        ?.n,
    ).toBe(0);
    await ops.query(`select settle.set_purge_min_retention(interval '24 hours')`);
  });

  it('tenant-bound consumer roles read only a consumer limited to their tenants', async () => {
    const ops = await admin();
    const acmeOnly = uniqueKey('acme');
    const everyone = uniqueKey('all');
    await registerConsumer(ops, acmeOnly, { tenants: ['acme'] });
    await registerConsumer(ops, everyone);
    const role = await loginRole('acmefeed', ['settle_consumer']);
    await ops.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [role.name]);
    const bound = await role.connect();
    const app = await db.app();
    const mine = await settle(app, 'mine');
    const theirs = newOperation('theirs', { tenant: 'globex' });
    await complete(app, await acquire(app, theirs), { ok: 1 });

    const got = await drainKeys(bound, acmeOnly, [mine]);
    expect(keysOf(got)).toContain(mine);
    expect(got.every((e) => e.tenant === 'acme')).toBe(true);
    expect(await sqlStateOf(readFeed(bound, everyone)), 'a consumer beyond its tenants does not exist for it').toBe(
      'SE040',
    );
    // The role reads nothing else: no table, no operations view.
    expect(await sqlStateOf(bound.query('select * from settle_private.feed_events'))).toBe('42501');
    expect(await sqlStateOf(bound.query('select * from settle.operations'))).toBe('42501');
    expect(await sqlStateOf(bound.query(`select * from settle.register_consumer(name => 'x')`))).toBe('42501');
    const lanes = await bound.query<{ consumer: string }>('select consumer from settle.feed_consumers');
    expect(lanes.rows.map((r) => r.consumer)).toContain(acmeOnly);
    expect(lanes.rows.map((r) => r.consumer)).not.toContain(everyone);
  });

  it('bad input: typed errors', async () => {
    const ops = await admin();
    const reader = await consumerSession();
    expect(await sqlStateOf(readFeed(reader, 'no-such-consumer'))).toBe('SE040');
    const name = uniqueKey('twice');
    await registerConsumer(ops, name);
    await registerConsumer(ops, name); // same definition: fine
    expect(await sqlStateOf(registerConsumer(ops, name, { lanes: 3 }))).toBe('SE041');
    expect(await sqlStateOf(registerConsumer(ops, uniqueKey('x'), { lanes: 0 }))).toBe('SE008');
    expect(await sqlStateOf(readFeed(reader, name, 0))).toBe('SE008');
    expect(await sqlStateOf(readFeed(reader, name, 10, '0 seconds'))).toBe('SE007');
  });

  it('property: for any order of starts, commits and reads, every outcome is delivered exactly once and each read is a prefix in commit-safe order', async () => {
    const ops = await admin();
    const producers = await Promise.all([0, 1, 2, 3].map(() => db.app()));
    const reader = await consumerSession();
    type Step = { kind: 'start' | 'commit' | 'read'; who: number };
    const step = fc.record({
      kind: fc.constantFrom<'start' | 'commit' | 'read'>('start', 'commit', 'read'),
      who: fc.integer({ min: 0, max: 3 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 24 }), async (steps: Step[]) => {
        const name = uniqueKey('prop');
        await registerConsumer(ops, name);
        const open = new Map<number, string[]>();
        const committed = new Set<string>();
        const delivered: FeedEventRow[] = [];
        for (const s of steps) {
          const p = producers[s.who] as pg.Client;
          if (s.kind === 'start') {
            if (!open.has(s.who)) {
              await p.query('begin');
              open.set(s.who, []);
            }
            open.get(s.who)?.push(await settle(p, 'prop'));
          } else if (s.kind === 'commit' && open.has(s.who)) {
            await p.query('commit');
            for (const k of open.get(s.who) ?? []) committed.add(k);
            open.delete(s.who);
          } else if (s.kind === 'read') {
            delivered.push(...(await drain(reader, name, 3)));
            // Never an event of a transaction that has not committed.
            for (const e of delivered) expect(committed.has(e.key)).toBe(true);
          }
        }
        for (const [who, keys] of open) {
          await (producers[who] as pg.Client).query('commit');
          for (const k of keys) committed.add(k);
        }
        open.clear();
        const missing = [...committed].filter((k) => !delivered.some((e) => e.key === k));
        delivered.push(...(await drainKeys(reader, name, missing, 3)));
        const mine = delivered.filter((e) => committed.has(e.key));
        expect(keysOf(mine).sort()).toEqual([...committed].sort());
        expect(new Set(delivered.map((e) => e.event_id)).size).toBe(delivered.length);
        await ops.query('select settle.drop_consumer($1)', [name]);
      }),
      { numRuns: 25 },
    );
  });
});
