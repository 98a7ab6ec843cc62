import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { asAdmin, uniqueKey, useEngineDatabase } from './support/database.js';
import { drain, drainKeys, type FeedEventRow, registerConsumer, waitForHorizon } from './support/feed.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, complete } from './support/settle.js';

// settle.reset_consumer never places a lane above an event that can still commit. Session A
// (an application login) settles key A and keeps its transaction open; session B settles key B
// and commits; a tenant-bound admin login resets the consumer to a time before both; A commits.
// The consumer (a login holding settle_consumer) must receive A and B. A reset that looked only
// at the committed events placed the lane just before B, and A (an older transaction id) then
// committed below it and was never delivered. The same with '-infinity' once trim_feed removed
// the events below A's transaction.
const db = useEngineDatabase('feed_reset');
const loginRole = useLoginRoles(db);

interface Actors {
  readonly admin: pg.Client;
  readonly a: pg.Client;
  readonly b: pg.Client;
  readonly reader: pg.Client;
}

async function actors(): Promise<Actors> {
  const su = await db.connect();
  const adminRole = await loginRole('feedops', ['settle_admin']);
  await asAdmin(su);
  await su.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [adminRole.name]);
  const app = await loginRole('feedapp', ['settle_app']);
  const consumer = await loginRole('feedreader', ['settle_consumer']);
  return {
    admin: await adminRole.connect(),
    a: await app.connect(),
    b: await app.connect(),
    reader: await consumer.connect(),
  };
}

async function settle(client: pg.ClientBase, prefix: string): Promise<string> {
  const op = newOperation(prefix, { tenant: 'acme' });
  expect((await complete(client, await acquire(client, op), { ok: prefix })).outcome).toBe('settled');
  return op.key as string;
}

const keysOf = (events: readonly FeedEventRow[]): string[] => events.map((e) => e.key);

async function reset(admin: pg.ClientBase, name: string, toTime: string): Promise<void> {
  await admin.query(`select * from settle.reset_consumer(name => $1, to_time => $2::timestamptz)`, [name, toTime]);
}

describe('reset_consumer and transactions still running', () => {
  it('a reset to a time while an older transaction is open: its outcome is delivered after it commits', async () => {
    const { admin, a, b, reader } = await actors();
    const name = uniqueKey('reset-race');
    await registerConsumer(admin, name, { tenants: ['acme'] });
    const t0 = (await admin.query<{ t0: string }>('select clock_timestamp()::text as t0')).rows[0]?.t0 as string;

    await a.query('begin');
    const keyA = await settle(a, 'held');
    const keyB = await settle(b, 'committed');
    await reset(admin, name, t0);
    await a.query('commit');

    await waitForHorizon(admin);
    const delivered = await drainKeys(reader, name, [keyA, keyB]);
    expect(
      keysOf(delivered)
        .filter((k) => k === keyA || k === keyB)
        .sort(),
    ).toEqual([keyA, keyB].sort());
    expect(await drain(reader, name), 'nothing twice').toEqual([]);
  });

  it("a reset to '-infinity' after a trim, while an older transaction is open: its outcome is delivered", async () => {
    const { admin, a, b, reader } = await actors();
    const su = await db.connect();
    // Only this test's consumer holds events back from trim_feed.
    await su.query(
      'select settle.drop_consumer(consumer) from (select distinct consumer from settle.feed_consumers) c',
    );
    const name = uniqueKey('reset-trim');
    await registerConsumer(admin, name, { tenants: ['acme'] });
    const before = await settle(b, 'trimmed');
    expect(keysOf(await drainKeys(reader, name, [before]))).toContain(before);
    await admin.query('select settle.trim_feed()').catch(async () => {
      // A tenant-bound admin may not trim (engine-wide retention): an unbound admin does.
      await asAdmin(su);
      await su.query('select settle.trim_feed()');
      await su.query('reset role');
    });
    const retained = await su.query<{ n: number }>(
      `select count(*)::int as n from settle_private.feed_events e where e.key = $1`,
      [before],
    );
    expect(retained.rows[0]?.n, 'trim removed the acknowledged event').toBe(0);

    await a.query('begin');
    const keyA = await settle(a, 'held');
    const keyB = await settle(b, 'committed');
    await reset(admin, name, '-infinity');
    await a.query('commit');

    await waitForHorizon(admin);
    const delivered = await drainKeys(reader, name, [keyA, keyB]);
    expect(
      keysOf(delivered)
        .filter((k) => k === keyA || k === keyB)
        .sort(),
    ).toEqual([keyA, keyB].sort());
  });

  it('a dry run reports the position a reset would take, at or below the horizon of running transactions', async () => {
    const { admin, a, b } = await actors();
    const name = uniqueKey('reset-dry');
    await registerConsumer(admin, name, { tenants: ['acme'] });
    const t0 = (await admin.query<{ t0: string }>('select clock_timestamp()::text as t0')).rows[0]?.t0 as string;
    await a.query('begin');
    await settle(a, 'held');
    const xidA = (await a.query<{ xid: string }>('select pg_current_xact_id()::text as xid')).rows[0]?.xid as string;
    await settle(b, 'committed');
    const dry = await admin.query<{ position_after: string }>(
      `select position_after from settle.reset_consumer(name => $1, to_time => $2::timestamptz, dry_run => true)`,
      [name, t0],
    );
    const after = dry.rows[0]?.position_after as string;
    expect(
      BigInt(after.split('/')[0] as string),
      `position ${after} is above the open transaction ${xidA}`,
    ).toBeLessThanOrEqual(BigInt(xidA));
    await a.query('rollback');
  });
});
