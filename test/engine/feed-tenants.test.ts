import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { asAdmin, uniqueKey, useEngineDatabase } from './support/database.js';
import { registerConsumer } from './support/feed.js';
import { useLoginRoles } from './support/login-role.js';

// Consumer names are engine-wide, and a login bound to tenants learns nothing of another tenant's
// consumers from them: a consumer beyond its tenants answers exactly as a name that does not
// exist (read_feed, ack_feed, await_feed, reset_consumer: SE040 with the same message, detail and
// hint; drop_consumer: false), and a taken name answers SE041 without the holder's tenants or lanes.
const db = useEngineDatabase('feed_tenants');
const loginRole = useLoginRoles(db);

interface Refusal {
  code: string | undefined;
  message: string;
  detail: string | undefined;
  hint: string | undefined;
}

async function refusal(client: pg.ClientBase, sql: string, params: unknown[]): Promise<Refusal> {
  try {
    await client.query(sql, params);
  } catch (error) {
    const e = error as { code?: string; message: string; detail?: string; hint?: string };
    return { code: e.code, message: e.message, detail: e.detail?.replace(params[0] as string, '<name>'), hint: e.hint };
  }
  throw new Error(`expected ${sql} to fail`);
}

async function bound(prefix: string, grant: string, tenant: string): Promise<pg.Client> {
  const su = await db.connect();
  await asAdmin(su);
  const role = await loginRole(prefix, [grant]);
  await su.query(`select settle.grant_tenant(role => $1, tenant => $2)`, [role.name, tenant]);
  return role.connect();
}

describe('consumer names across tenants', () => {
  it("globex's consumer answers an acme-bound login exactly as a name that does not exist", async () => {
    const su = await db.connect();
    await asAdmin(su);
    const theirs = uniqueKey('globex-ledger');
    const missing = uniqueKey('no-such');
    await registerConsumer(su, theirs, { tenants: ['globex'], lanes: 3 });
    const reader = await bound('acmereader', 'settle_consumer', 'acme');
    const ops = await bound('acmeops', 'settle_admin', 'acme');

    const calls: [pg.Client, string][] = [
      [reader, 'select * from settle.read_feed(consumer => $1)'],
      [
        reader,
        `select settle.ack_feed(consumer => $1, lane => 0, lease_token => gen_random_uuid(), position_xid => null, event_id => null)`,
      ],
      [reader, 'select settle.await_feed(consumer => $1)'],
      [ops, 'select * from settle.reset_consumer(name => $1)'],
      [ops, `select * from settle.reset_consumer(name => $1, to_time => '-infinity', dry_run => true)`],
    ];
    for (const [client, sql] of calls) {
      const forTheirs = await refusal(client, sql, [theirs]);
      const forMissing = await refusal(client, sql, [missing]);
      expect(forTheirs.code, sql).toBe('SE040');
      expect(forTheirs, sql).toEqual(forMissing);
    }
    const dropped = await ops.query<{ d: boolean }>('select settle.drop_consumer($1) as d', [theirs]);
    expect(dropped.rows[0]?.d, "another tenant's consumer does not exist for it").toBe(false);
    expect((await su.query('select 1 from settle.feed_consumers where consumer = $1', [theirs])).rowCount).toBe(3);

    // Registering the taken name: SE041, without globex's tenants or lanes.
    const taken = await refusal(ops, `select * from settle.register_consumer(name => $1, tenants => '{acme}')`, [
      theirs,
    ]);
    expect(taken.code).toBe('SE041');
    expect(JSON.parse(taken.detail as string)).toEqual({ consumer: '<name>' });
    expect(taken.detail).not.toMatch(/globex|lanes/);
    // The same answer for a name its own tenants' consumer holds with another definition.
    const mine = uniqueKey('acme-ledger');
    await ops.query(`select * from settle.register_consumer(name => $1, tenants => '{acme}')`, [mine]);
    const own = await refusal(
      ops,
      `select * from settle.register_consumer(name => $1, tenants => '{acme}', lanes => 2)`,
      [mine],
    );
    expect(own).toEqual(taken);
  });
});
