import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { asAdmin, uniqueKey, useEngineDatabase } from './support/database.js';
import { drain, drainKeys, readFeed, registerConsumer, waitForHorizon } from './support/feed.js';
import { newOperation } from './support/fixtures.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, complete } from './support/settle.js';

// What holds the feed's horizon is named. A consumer login bound to globex runs the exactly-once
// loop (begin; read_feed; ... its handler idles): its transaction id holds the horizon, so acme's
// consumer receives nothing until it ends. settle.feed_horizon names that session (pid, login,
// application_name, transaction age, a feed consumer and which), settle.metrics counts it, and a
// login bound to acme sees that a consumer's transaction holds it without globex's names.
const db = useEngineDatabase('feed_horizon');
const loginRole = useLoginRoles(db);

interface HorizonRow {
  pid: number | null;
  login: string | null;
  application_name: string | null;
  state: string | null;
  xid: string;
  xid_age: number;
  xact_age_seconds: number | null;
  holds_horizon: boolean;
  feed_consumer: boolean;
  consumer: string | null;
  lane: number | null;
}

async function settle(client: pg.ClientBase, tenant: string): Promise<string> {
  const op = newOperation(tenant, { tenant });
  expect((await complete(client, await acquire(client, op), { ok: 1 })).outcome).toBe('settled');
  return op.key as string;
}

describe('what holds the feed horizon', () => {
  it("a globex consumer's open batch holds acme's consumer: the views and the metrics name it", async () => {
    const su = await db.connect();
    await asAdmin(su);
    const acme = uniqueKey('acme-ledger');
    const globex = uniqueKey('globex-ledger');
    await registerConsumer(su, acme, { tenants: ['acme'] });
    await registerConsumer(su, globex, { tenants: ['globex'] });
    const globexRole = await loginRole('globexfeed', ['settle_consumer']);
    const acmeRole = await loginRole('acmefeed', ['settle_consumer']);
    await su.query(`select settle.grant_tenant(role => $1, tenant => 'globex')`, [globexRole.name]);
    await su.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [acmeRole.name]);
    const readonlyRole = await loginRole('feedwatch', ['settle_readonly']);
    const app = await (await loginRole('feedapp', ['settle_app'])).connect();

    const globexKey = await settle(app, 'globex');
    const slow = await globexRole.connect();
    await slow.query(`set application_name = 'globex-ledger-worker'`);
    const pid = (await slow.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
    // Its batch, read in the documented exactly-once loop: the handler is slow.
    await waitForHorizon(su);
    await slow.query('begin');
    const batch = await readFeed(slow, globex);
    expect(batch.map((e) => e.key)).toContain(globexKey);

    const acmeKey = await settle(app, 'acme');
    const acmeReader = await acmeRole.connect();
    expect(await drain(acmeReader, acme), 'the open batch holds the horizon: acme receives nothing').toEqual([]);

    const watcher = await readonlyRole.connect();
    // The horizon is cluster-wide: another test file's older transaction may be the oldest; the
    // slow consumer's row is there either way, and is the horizon unless such a one is open.
    const holders = (await watcher.query<HorizonRow>('select * from settle.feed_horizon')).rows;
    const slowRow = holders.find((h) => h.pid === pid);
    expect(slowRow, JSON.stringify(holders)).toMatchObject({
      pid,
      login: globexRole.name,
      application_name: 'globex-ledger-worker',
      feed_consumer: true,
      consumer: globex,
      lane: 0,
    });
    expect(slowRow?.xid_age).toBeGreaterThanOrEqual(0);
    expect(slowRow?.xact_age_seconds).toBeGreaterThan(0);
    if (slowRow?.holds_horizon === true) {
      const metrics = (
        await watcher.query<{ feed_horizon_held_by_consumer: string; feed_horizon_age_seconds: number }>(
          'select feed_horizon_held_by_consumer, feed_horizon_age_seconds from settle.metrics',
        )
      ).rows[0];
      expect(metrics?.feed_horizon_held_by_consumer).toBe('1');
      expect(metrics?.feed_horizon_age_seconds).toBeGreaterThan(0);
    }

    // acme's own consumer login sees that a feed consumer's transaction holds it, not whose.
    const seen = (await acmeReader.query<HorizonRow>('select * from settle.feed_horizon where pid = $1', [pid]))
      .rows[0];
    expect(seen).toMatchObject({
      pid,
      login: null,
      application_name: null,
      feed_consumer: true,
      consumer: null,
      lane: null,
    });

    await slow.query('commit');
    expect((await drainKeys(acmeReader, acme, [acmeKey])).map((e) => e.key)).toContain(acmeKey);
  });
});
