import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { expect, it } from 'vitest';
import { newOperation } from '../engine/support/fixtures.js';
import { acquire, claim, complete, fail } from '../engine/support/settle.js';
import { describeCitus, useCitus } from './support/cluster.js';

// Tenant binding set up after `pg-settle distribute` (settle.grant_tenant
// on the reference table of bindings), and a bound login isolated to its tenants on every node:
// the views show only its tenants, and every private table and every shard of them is refused to
// every caller role, on the coordinator and straight on each worker, as on plain PostgreSQL.
const citus = useCitus();

const VIEWS = ['operations', 'attempts', 'audit_log', 'dead_letters', 'settlements', 'stats'] as const;

/** A login role in `group`, created for this test (roles propagate to the workers). */
async function newLogin(su: pg.Client, group: string): Promise<string> {
  const name = `citus_${group.replace('settle_', '')}_${randomBytes(3).toString('hex')}`;
  await su.query(`create role ${name} login in role ${group}`);
  return name;
}

describeCitus('tenant binding and isolation on Citus', () => {
  it('grant_tenant and revoke_tenant work as a superuser and as a settle_admin login; the bound app login reaches only its tenants, through the coordinator and on a worker', async () => {
    const su = await citus.coordinator();
    const [app, reader] = [await newLogin(su, 'settle_app'), await newLogin(su, 'settle_readonly')];
    const t1 = `bound-${randomBytes(3).toString('hex')}`;
    const t2 = `bound-${randomBytes(3).toString('hex')}`;
    const admin = await citus.coordinator('settle_citus_admin');
    expect((await su.query<{ t: string[] }>('select settle.grant_tenant($1, $2) as t', [app, t2])).rows[0]?.t).toEqual([
      t2,
    ]);
    expect(
      (await admin.query<{ t: string[] }>('select settle.grant_tenant($1, $2) as t', [app, t1])).rows[0]?.t,
    ).toEqual([t1, t2].sort());
    expect(
      (await admin.query<{ t: string[] }>('select settle.grant_tenant($1, $2) as t', [app, t1])).rows[0]?.t,
    ).toEqual([t1, t2].sort());
    expect(
      (await admin.query<{ t: string[] }>('select settle.revoke_tenant($1, $2) as t', [app, t2])).rows[0]?.t,
    ).toEqual([t1]);
    expect(
      (await admin.query<{ t: string[] }>('select settle.grant_tenant($1, $2) as t', [reader, t1])).rows[0]?.t,
    ).toEqual([t1]);
    const { rows: log } = await admin.query<{ event: string; actor: string }>(
      `select event, actor from settle.admin_log where detail ->> 'role' = $1 order by log_id`,
      [app],
    );
    expect(log.map((r) => r.event)).toEqual(['grant_tenant', 'grant_tenant', 'grant_tenant', 'revoke_tenant']);
    expect(log.slice(1).every((r) => r.actor === 'settle_citus_admin')).toBe(true);

    // The bound login: its tenant works, any other is refused with SE013, on every node.
    const mine = newOperation('bound-mine', { tenant: t1 });
    const other = newOperation('bound-other', { tenant: t2 });
    for (const node of citus.nodes) {
      const c = await citus.node(node, app);
      const op = { ...mine, key: `${mine.key as string}-${String(node)}` };
      const ticket = await acquire(c, op);
      expect(await complete(c, ticket, { on: String(node) })).toMatchObject({ outcome: 'settled' });
      await expect(claim(c, { ...other, key: `${other.key as string}-${String(node)}` })).rejects.toMatchObject({
        code: 'SE013',
      });
    }
  });

  it('a bound settle_readonly login sees only its tenant in every view, on the coordinator and on every worker', async () => {
    const su = await citus.coordinator();
    const app = await citus.coordinator('settle_citus_app');
    const reader = await newLogin(su, 'settle_readonly');
    const mine = `seen-${randomBytes(3).toString('hex')}`;
    const theirs = `hidden-${randomBytes(3).toString('hex')}`;
    for (const tenant of [mine, theirs]) {
      // Keys on both workers, settled and failed, so that every view has rows of both tenants.
      for (let i = 0; i < 6; i++) {
        const t = await acquire(
          app,
          newOperation(`iso-${i}`, { tenant, request: { iban: `DE${i}${tenant}` }, max_attempts: 1 }),
        );
        if (i % 2 === 0) await complete(app, t, { paid: tenant });
        else await fail(app, t, { code: 'declined' }, true); // retryable, but its only attempt: a dead letter
      }
    }
    await su.query('select settle.grant_tenant($1, $2)', [reader, mine]);
    for (const node of citus.nodes) {
      const c = await citus.node(node, reader);
      for (const view of VIEWS) {
        const { rows } = await c.query<{ tenant: string }>(
          `select distinct tenant from settle.${view} where tenant in ($1, $2)`,
          [mine, theirs],
        );
        expect({ node, view, tenants: rows.map((r) => r.tenant) }).toEqual({ node, view, tenants: [mine] });
      }
      const inspected = await c
        .query(`select * from settle.inspect($1, $2)`, [theirs, 'any'])
        .catch((e: { code?: string }) => e);
      expect(inspected).toMatchObject({ code: 'SE013' });
    }
    // An unbound reader (a trusted dashboard) sees both.
    const all = await citus.coordinator('settle_citus_readonly');
    const { rows } = await all.query<{ tenant: string }>(
      `select distinct tenant from settle.operations where tenant in ($1, $2) order by 1`,
      [mine, theirs],
    );
    expect(rows.map((r) => r.tenant)).toEqual([mine, theirs].sort());
  });

  it('every private table and every shard of it is refused to every caller role, on the coordinator and on every worker', async () => {
    const su = await citus.coordinator();
    const bound = await newLogin(su, 'settle_readonly');
    await su.query('select settle.grant_tenant($1, $2)', [bound, 'acme']);
    const callers = ['settle_citus_app', 'settle_citus_readonly', 'settle_citus_admin', bound];
    const { rows: tables } = await su.query<{ rel: string }>(`
      select c.oid::regclass::text as rel from pg_class c join pg_namespace n on n.oid = c.relnamespace
       where n.nspname = 'settle_private' and c.relkind in ('r', 'p') order by 1`);
    expect(tables.map((t) => t.rel)).toEqual(
      expect.arrayContaining([
        'settle_private.operations',
        'settle_private.attempts',
        'settle_private.audit_log',
        'settle_private.tenant_bindings',
        'settle_private.binding_floors',
        'settle_private.admin_log',
      ]),
    );
    // Every shard with the node that holds it (the coordinator holds the reference tables' too).
    const { rows: shards } = await su.query<{ shard: string; port: number }>(`
      select s.logicalrelid::regclass::text || '_' || s.shardid as shard, n.nodeport as port
        from pg_dist_shard s join pg_dist_placement p using (shardid) join pg_dist_node n on n.groupid = p.groupid
       where s.logicalrelid::regclass::text like 'settle\\_private.%'`);
    let tried = 0;
    for (const node of citus.nodes) {
      const probe = await citus.node(node);
      const port = Number(
        (await probe.query<{ port: string }>(`select current_setting('port') as port`)).rows[0]?.port,
      );
      // settle_private.settings is a plain table of the coordinator; the distributed ones have shells on every node.
      const local = [];
      for (const t of tables)
        if ((await probe.query<{ r: string | null }>('select to_regclass($1)::text as r', [t.rel])).rows[0]?.r !== null)
          local.push(t.rel);
      const here = [...local, ...shards.filter((s) => s.port === port).map((s) => s.shard)];
      // The shards are really there, for the superuser.
      for (const rel of here) expect((await probe.query(`select count(*) from ${rel}`)).rowCount).toBe(1);
      for (const user of callers) {
        const c = await citus.node(node, user);
        for (const rel of here) {
          tried++;
          const error = await c.query(`select * from ${rel} limit 1`).then(
            () => undefined,
            (e: { code?: string }) => e,
          );
          expect({ node, user, rel, code: error?.code }).toEqual({ node, user, rel, code: '42501' });
        }
      }
    }
    expect(tried).toBeGreaterThan(callers.length * citus.nodes.length * tables.length);
  });
});
