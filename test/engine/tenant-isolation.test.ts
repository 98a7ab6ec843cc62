import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { storedOperation } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, fail, redrive, reportUnknown, type Ticket } from './support/settle.js';

// A login bound to tenants sees and acts on those tenants only,
// in every view and every maintenance call; its binding follows the role (OID) and fails closed.
// Every caller is a real login granted a deployment role (settle_app, settle_readonly,
// settle_admin), never the superuser; the superuser only sets the scene and renames roles.
const db = useEngineDatabase('tenant_isolation');
const loginRole = useLoginRoles(db);

const tag = (): string => randomBytes(3).toString('hex');

/** Two fresh tenants: the bound login's (mine) and another one's (theirs). */
function tenants(): { mine: string; theirs: string } {
  const t = tag();
  return { mine: `mine_${t}`, theirs: `theirs_${t}` };
}

async function platformAdmin(): Promise<pg.Client> {
  return (await loginRole('platform_ops', ['settle_admin'])).connect();
}

/** A login granted `grant` and bound to `tenant` by the (unbound) platform admin. */
async function boundLogin(admin: pg.Client, prefix: string, grant: string, tenant: string) {
  const role = await loginRole(prefix, [grant]);
  await admin.query(`select settle.grant_tenant(role => $1, tenant => $2)`, [role.name, tenant]);
  return role;
}

/** A dead-lettered operation (attempts_exhausted) in `tenant`. */
async function deadLetter(app: pg.Client, tenant: string): Promise<Ticket> {
  const ticket = await acquire(app, newOperation('dl', { tenant, max_attempts: 1 }));
  expect((await fail(app, ticket, { code: 'declined' }, true)).outcome).toBe('settled');
  return ticket;
}

describe('defect 6: every view a bound login can read is tenant-filtered', () => {
  it('a readonly and an admin login bound to one tenant see no row of another tenant in any view of schema settle', async () => {
    const { mine, theirs } = tenants();
    const admin = await platformAdmin();
    const superuser = await db.connect();
    const app = await (await loginRole('writer', ['settle_app'])).connect();
    // Their tenant: something in every view (a live lease, an unknown, a conflict, a dead
    // letter, a settlement, audit rows, grants and a revocation floor).
    const theirService = await boundLogin(admin, 'their_svc', 'settle_app', theirs);
    await acquire(app, newOperation('live', { tenant: theirs }));
    await reportUnknown(app, await acquire(app, newOperation('unk', { tenant: theirs })));
    const conflicted = await acquire(app, newOperation('cf', { tenant: theirs }));
    expect((await complete(app, { ...conflicted, binding_generation: 7 }, { x: 1 })).outcome).toBe('conflict');
    await deadLetter(app, theirs);
    await complete(app, await acquire(app, newOperation('done', { tenant: theirs })), { paid: true });
    await admin.query(`select settle.revoke_binding($1, 'their-principal', 3)`, [theirs]);
    await admin.query(`select settle.register_consumer(name => 'their-feed', tenants => array[$1])`, [theirs]);
    // Mine: one live lease, one settlement.
    await acquire(app, newOperation('live', { tenant: mine }));
    await complete(app, await acquire(app, newOperation('done', { tenant: mine })), { paid: true });

    const readers = [
      await boundLogin(admin, 'ro', 'settle_readonly', mine),
      await boundLogin(admin, 'adm', 'settle_admin', mine),
    ];
    // Every view of schema settle, from the catalog: a new view is covered the day it is added.
    const { rows: views } = await superuser.query<{ name: string; has_tenant: boolean }>(
      `select c.relname as name,
              exists (select 1 from pg_attribute a where a.attrelid = c.oid and a.attname = 'tenant' and not a.attisdropped) as has_tenant
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname = 'settle' and c.relkind in ('v', 'm') order by 1`,
    );
    expect(views.length).toBeGreaterThanOrEqual(8);
    // The views without a tenant column, each with its own check below; any other must have one.
    // settle.feed_consumers has `tenants` (a consumer's tenant set): a bound login sees only
    // consumers limited to its tenants (their-feed must not show: the secrets check below).
    // settle.upkeep lists the engine-wide upkeep jobs (name, interval, last run): no tenant's data;
    // the secrets check below holds it to that. settle.feed_horizon lists the sessions holding the
    // feed's horizon: to a bound login without their login, application_name or another tenant's
    // consumer (the secrets check again).
    const tenantFree = new Set(['admin_log', 'metrics', 'feed_consumers', 'feed_horizon', 'upkeep']);
    for (const view of views)
      expect(view.has_tenant || tenantFree.has(view.name), `settle.${view.name} has a tenant column`).toBe(true);
    const secrets = [theirs, theirService.name, 'their-principal'];

    for (const role of readers) {
      const reader = await role.connect();
      for (const view of views) {
        const { rows } = await reader.query<{ j: string }>(`select to_jsonb(v)::text as j from settle.${view.name} v`);
        for (const row of rows) {
          for (const secret of secrets) expect(row.j, `${role.name} reads settle.${view.name}`).not.toContain(secret);
        }
        if (view.has_tenant) {
          const seen = await reader.query<{ tenant: string }>(`select distinct tenant from settle.${view.name}`);
          expect(
            seen.rows.every((r) => r.tenant === mine),
            `settle.${view.name} shows only ${mine}`,
          ).toBe(true);
        }
      }
      // Not vacuous: the reader does see its own tenant.
      expect((await reader.query(`select 1 from settle.operations where tenant = $1`, [mine])).rows).toHaveLength(2);
      const log = await reader.query<{ event: string; detail: { tenant: string; tenants?: string[] } }>(
        `select event, detail from settle.admin_log`,
      );
      expect(log.rows.length).toBeGreaterThan(0);
      for (const row of log.rows) {
        expect(row.detail.tenant).toBe(mine);
        for (const t of row.detail.tenants ?? []) expect(t).toBe(mine);
      }
      // settle.metrics counts the reader's tenants only: one live lease, nothing else.
      const { rows: metrics } = await reader.query<Record<string, string>>(`select * from settle.metrics`);
      const counts = Object.fromEntries(Object.entries(metrics[0] ?? {}).map(([k, v]) => [k, Number(v)]));
      expect(counts).toMatchObject({
        operations_in_flight: 1,
        operations_unknown: 0,
        operations_conflict: 0,
        dead_letters_failed: 0,
        dead_letters_needs_reconciliation: 0,
        conflicts_recent: 0,
        refused_observations_recent: 0,
      });
    }
    // An unbound reader still sees everything (the filter is the binding, not the role).
    const everyone = await (await loginRole('ro_all', ['settle_readonly'])).connect();
    const all = await everyone.query(`select distinct tenant from settle.operations where tenant = any ($1)`, [
      [mine, theirs],
    ]);
    expect(all.rows).toHaveLength(2);
    const { rows: allMetrics } = await everyone.query<{ operations_unknown: string }>(
      `select operations_unknown from settle.metrics`,
    );
    expect(Number(allMetrics[0]?.operations_unknown)).toBeGreaterThanOrEqual(1);
  });
});

describe('defect 7: a binding follows the role (its OID) and fails closed', () => {
  it('a bound login renamed (while connected, and on a new connection) stays bound: never widened to another tenant', async () => {
    const { mine, theirs } = tenants();
    const admin = await platformAdmin();
    const superuser = await db.connect();
    const role = await boundLogin(admin, 'app_b', 'settle_app', mine);
    const svc = await role.connect();
    const renamed = `${role.name}_rotated`;
    try {
      // The rename is not committed yet; then it is: the bound session is refused in both states.
      await superuser.query('begin');
      await superuser.query(`alter role "${role.name}" rename to "${renamed}"`);
      expect(await sqlStateOf(claim(svc, newOperation('r', { tenant: theirs })))).toBe('SE013');
      await superuser.query('commit');
      expect(await sqlStateOf(claim(svc, newOperation('r', { tenant: theirs })))).toBe('SE013');
      expect((await claim(svc, newOperation('r', { tenant: mine }))).outcome).toBe('acquired');
      // A new connection under the new name: the same binding.
      const url = new URL(db.url);
      url.username = renamed;
      url.password = '';
      const { default: pgModule } = await import('pg');
      const fresh = new pgModule.Client({ connectionString: url.toString() });
      await fresh.connect();
      try {
        expect(await sqlStateOf(claim(fresh, newOperation('r', { tenant: theirs })))).toBe('SE013');
        expect((await claim(fresh, newOperation('r', { tenant: mine }))).outcome).toBe('acquired');
      } finally {
        await fresh.end();
      }
      // The admin log and every later grant name the role by its current name.
      const { rows } = await admin.query(`select settle.grant_tenant($1, $2) as tenants`, [renamed, mine]);
      expect(rows[0].tenants).toEqual([mine]);
    } finally {
      await superuser.query(`alter role "${renamed}" rename to "${role.name}"`).catch(() => {});
    }
  });

  it('racing: claims on another tenant while the login is renamed back and forth are refused, every one', async () => {
    const { mine, theirs } = tenants();
    const admin = await platformAdmin();
    const superuser = await db.connect();
    const role = await boundLogin(admin, 'app_race', 'settle_app', mine);
    const svcs = await Promise.all([role.connect(), role.connect()]);
    const names = [role.name, `${role.name}_x`];
    let renames = 0;
    let stop = false;
    const renamer = (async () => {
      while (!stop) {
        await superuser.query(`alter role "${names[renames % 2]}" rename to "${names[(renames + 1) % 2]}"`);
        renames += 1;
      }
    })();
    try {
      const answers = await Promise.all(
        svcs.map(async (svc) => {
          const codes: string[] = [];
          // Until the renamer has committed several renames, and at least 20 claims each.
          for (let i = 0; i < 20 || renames < 6; i += 1) {
            codes.push(
              await sqlStateOf(claim(svc, newOperation('race', { tenant: theirs }))).catch((e: unknown) => String(e)),
            );
          }
          return codes;
        }),
      );
      expect(renames).toBeGreaterThanOrEqual(6);
      for (const codes of answers) expect(new Set(codes)).toEqual(new Set(['SE013']));
    } finally {
      stop = true;
      await renamer;
      if (renames % 2 === 1) await superuser.query(`alter role "${names[1]}" rename to "${names[0]}"`);
    }
  });

  it('a bound role dropped and re-created under its name is refused everywhere but the old tenants until an admin rebinds it', async () => {
    const { mine, theirs } = tenants();
    const admin = await platformAdmin();
    const superuser = await db.connect();
    const role = await boundLogin(admin, 'app_again', 'settle_app', mine);
    await superuser.query(`drop role "${role.name}"`);
    await superuser.query(`create role "${role.name}" login in role settle_app`);
    const svc = await role.connect();
    // The binding cannot be resolved by OID; the name it recorded still binds (fail closed).
    expect(await sqlStateOf(claim(svc, newOperation('d', { tenant: theirs })))).toBe('SE013');
    const ro = await boundLogin(admin, 'ro_again', 'settle_readonly', mine);
    const reader = await ro.connect();
    expect((await reader.query(`select 1 from settle.operations where tenant = $1`, [theirs])).rows).toHaveLength(0);
    // An explicit grant to the new role replaces the dropped role's binding.
    await admin.query(`select settle.grant_tenant($1, $2)`, [role.name, theirs]);
    expect((await claim(svc, newOperation('d', { tenant: theirs }))).outcome).toBe('acquired');
    expect(await sqlStateOf(claim(svc, newOperation('d', { tenant: mine })))).toBe('SE013');
    const { rows } = await admin.query<{ detail: { dropped_role_bindings?: { tenants: string[] }[] } }>(
      `select detail from settle.admin_log where event = 'grant_tenant' and detail->>'role' = $1 and detail->>'tenant' = $2`,
      [role.name, theirs],
    );
    expect(rows[0]?.detail.dropped_role_bindings?.[0]?.tenants).toEqual([mine]);
  });
});

describe('defect 12: a settle_admin login bound to tenants acts on those tenants only, in every maintenance call', () => {
  it('redrive, inspect, revoke_binding, grant_tenant and revoke_tenant on another tenant answer SE013 whatever the key holds', async () => {
    const { mine, theirs } = tenants();
    const platform = await platformAdmin();
    const app = await (await loginRole('writer', ['settle_app'])).connect();
    const bound = await (await boundLogin(platform, 'tenant_ops', 'settle_admin', mine)).connect();
    const theirSvc = await boundLogin(platform, 'their_svc', 'settle_app', theirs);
    const dead = await deadLetter(app, theirs);
    const running = await acquire(app, newOperation('run', { tenant: theirs }));

    const refusals = [
      bound.query(`select * from settle.redrive(tenant => $1, key => $2)`, [theirs, dead.key]),
      bound.query(`select * from settle.redrive(tenant => $1, key => $2)`, [theirs, running.key]), // was SE011 + status
      bound.query(`select * from settle.redrive(tenant => $1, key => $2, request => '{"probe":1}')`, [
        theirs,
        dead.key,
      ]), // was SE012
      bound.query(`select * from settle.redrive(tenant => $1, key => 'no-such-key')`, [theirs]), // was SE010
      bound.query(`select * from settle.inspect($1, $2)`, [theirs, dead.key]),
      bound.query(`select settle.revoke_binding($1, 'svc-payments', 9)`, [theirs]),
      bound.query(`select settle.grant_tenant(session_user::text, $1)`, [theirs]),
      bound.query(`select settle.revoke_tenant($1, $2)`, [theirSvc.name, theirs]),
    ];
    const errors = await Promise.all(
      refusals.map((p) =>
        p.then(
          () => null,
          (e: { code?: string; detail?: string; message?: string }) => e,
        ),
      ),
    );
    for (const error of errors) {
      expect(error?.code).toBe('SE013');
      expect(`${error?.message ?? ''} ${error?.detail ?? ''}`).not.toMatch(/running|pending|failed|dead/);
    }
    // Nothing changed: the dead letter is still one, their floor is unset, their service bound.
    expect(await storedOperation(await db.connect(), theirs, dead.key)).toMatchObject({ status: 'failed' });
    expect((await redrive(platform, { tenant: theirs, key: dead.key })).status).toBe('pending');
  });

  it('engine-wide changes and bindings of roles that reach other tenants are SE019; its own tenant is managed as before', async () => {
    const { mine, theirs } = tenants();
    const platform = await platformAdmin();
    const bound = await (await boundLogin(platform, 'tenant_ops', 'settle_admin', mine)).connect();
    const multi = await loginRole('multi_svc', ['settle_app']);
    const both = await loginRole('both_svc', ['settle_app']);
    await platform.query(`select settle.grant_tenant($1, $2), settle.grant_tenant($1, $3)`, [both.name, mine, theirs]);
    const own = await boundLogin(platform, 'own_svc', 'settle_app', mine);
    const app = await (await loginRole('writer', ['settle_app'])).connect();
    const ownDead = await deadLetter(app, mine);

    expect(await sqlStateOf(bound.query(`select settle.set_purge_min_retention(interval '1 hour')`))).toBe('SE019');
    expect(await sqlStateOf(bound.query(`select settle.grant_tenant($1, $2)`, [multi.name, mine]))).toBe('SE019'); // would narrow a multi-tenant service
    expect(await sqlStateOf(bound.query(`select settle.revoke_tenant($1, $2)`, [both.name, mine]))).toBe('SE019');
    expect(await sqlStateOf(bound.query(`select settle.revoke_tenant($1, null)`, [own.name]))).toBe('SE019'); // unbinding widens
    // Its own tenant: redrive, a floor, and the bindings of its own services.
    expect((await redrive(bound, { tenant: mine, key: ownDead.key })).status).toBe('pending');
    expect(
      (await bound.query(`select settle.revoke_binding($1, 'svc-payments', 2) as floor`, [mine])).rows[0].floor,
    ).toBe('2');
    expect((await bound.query(`select settle.revoke_tenant($1, $2) as t`, [own.name, mine])).rows[0].t).toEqual([]);
    expect((await bound.query(`select settle.grant_tenant($1, $2) as t`, [own.name, mine])).rows[0].t).toEqual([mine]);
  });

  it('expire_leases and purge by a bound admin touch only its tenants', async () => {
    const { mine, theirs } = tenants();
    const platform = await platformAdmin();
    const superuser = await db.connect();
    const bound = await (await boundLogin(platform, 'tenant_ops', 'settle_admin', mine)).connect();
    const app = await (await loginRole('writer', ['settle_app'])).connect();
    const [myLease, theirLease] = [
      await acquire(app, newOperation('l', { tenant: mine })),
      await acquire(app, newOperation('l', { tenant: theirs })),
    ];
    for (const t of [myLease, theirLease]) expect(await expireLease(superuser, t.tenant, t.key)).toBe(true);
    const [myDone, theirDone] = [newOperation('p', { tenant: mine }), newOperation('p', { tenant: theirs })];
    for (const op of [myDone, theirDone]) await complete(app, await acquire(app, op), { ok: 1 });

    const swept = await bound.query<{ expired: number }>(`select * from settle.expire_leases(batch_size => 1000)`);
    expect(swept.rows[0]?.expired).toBe(1);
    expect(await storedOperation(superuser, theirs, theirLease.key)).toMatchObject({ status: 'running' });
    expect(await storedOperation(superuser, mine, myLease.key)).toMatchObject({ status: 'pending' });

    await superuser.query(`update settle_private.settings set value = interval '0' where name = 'purge_min_retention'`);
    const purged = await bound.query<{ n: number }>(
      `select settle.purge(older_than => interval '0 seconds', batch_size => 1000) as n`,
    );
    expect(purged.rows[0]?.n).toBeGreaterThanOrEqual(1);
    expect(await storedOperation(superuser, mine, myDone.key as string)).toBeUndefined();
    expect(await storedOperation(superuser, theirs, theirDone.key as string)).toMatchObject({ status: 'completed' });
  });
});
