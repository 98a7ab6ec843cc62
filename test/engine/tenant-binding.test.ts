import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { countOperations } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, fail, get, heartbeat, reportUnknown } from './support/settle.js';

// Tenant binding. A login role holding tenant grants reaches only those tenants;
// a role without any is a trusted multi-tenant service. Callers are real login roles.
const db = useEngineDatabase('tenant_binding');
const loginRole = useLoginRoles(db);

async function errorOf(
  promise: Promise<unknown>,
): Promise<{ code: string; message: string; detail: string; hint: string }> {
  try {
    await promise;
  } catch (error) {
    const e = error as { code?: string; message?: string; detail?: string; hint?: string };
    return { code: e.code ?? '', message: e.message ?? '', detail: e.detail ?? '', hint: e.hint ?? '' };
  }
  throw new Error('expected an error');
}

async function adminSession(): Promise<pg.Client> {
  return (await loginRole('ops', ['settle_admin'])).connect();
}

describe('tenant binding', () => {
  it('a bound role claims, observes and reads its tenant; any other tenant is SE013 with nothing disclosed or stored', async () => {
    const admin = await adminSession();
    const superuser = await db.connect();
    const role = await loginRole('acme_svc', ['settle_app']);
    const trusted = await (await loginRole('platform', ['settle_app'])).connect();
    await admin.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [role.name]);
    const svc = await role.connect();

    const mine = newOperation('bound', { tenant: 'acme' });
    const ticket = await acquire(svc, mine);
    expect((await heartbeat(svc, ticket)).outcome).toBe('extended');
    expect((await complete(svc, ticket, { ok: 1 })).outcome).toBe('settled');
    expect(await get(svc, mine)).toMatchObject({ outcome: 'found', status: 'completed' });

    // globex: one key exists (claimed by the trusted service), one does not.
    const existing = newOperation('other', { tenant: 'globex' });
    const theirs = await acquire(trusted, existing);
    const missing = newOperation('other', { tenant: 'globex' });
    const before = await countOperations(superuser);
    const answers = [
      await errorOf(claim(svc, existing)),
      await errorOf(claim(svc, missing)),
      await errorOf(get(svc, existing)),
      await errorOf(get(svc, missing)),
      await errorOf(complete(svc, theirs, { stolen: true })),
      await errorOf(fail(svc, theirs, { no: 1 })),
      await errorOf(reportUnknown(svc, theirs)),
      await errorOf(heartbeat(svc, theirs)),
    ];
    for (const answer of answers) expect(answer.code).toBe('SE013');
    // The same words whether or not the key exists: nothing about globex is disclosed.
    const strip = (a: { message: string; detail: string; hint: string }) =>
      JSON.stringify(a)
        .replaceAll(existing.key ?? '', 'K')
        .replaceAll(missing.key ?? '', 'K');
    expect(strip(answers[0]!)).toBe(strip(answers[1]!));
    expect(strip(answers[2]!)).toBe(strip(answers[3]!));
    expect(await countOperations(superuser)).toBe(before);
    // The trusted service's operation is untouched by the refused calls.
    expect((await complete(trusted, theirs, { ok: 2 })).outcome).toBe('settled');
  });

  it('an SE013 refusal is audited in the server log (an audit row would roll back with the error)', async (context) => {
    const admin = await adminSession();
    const superuser = await db.connect();
    const role = await loginRole('logged', ['settle_app']);
    await admin.query(`select settle.grant_tenant($1, 'acme')`, [role.name]);
    const svc = await role.connect();
    const op = newOperation('logged', { tenant: 'globex' });
    expect(await sqlStateOf(claim(svc, op))).toBe('SE013');
    const readLog = async (): Promise<string | null> => {
      const { rows } = await superuser
        .query<{ text: string }>(
          `select pg_read_file(f, greatest(0, (pg_stat_file(f)).size - 4000000), 4000000) as text
           from (select current_setting('data_directory') || '/../server.log' as f) p`,
        )
        .catch(() => ({ rows: [] as { text: string }[] }));
      return rows[0]?.text ?? null;
    };
    if ((await readLog()) === null)
      context.skip('the server log is not readable here (not the local throwaway cluster)');
    const line = `"key": "${op.key ?? ''}"`;
    const deadline = Date.now() + 10_000;
    let log = (await readLog()) ?? '';
    while (!log.includes(line) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50)); // the logger writes asynchronously
      log = (await readLog()) ?? '';
    }
    const entry = log.split('\n').find((l) => l.includes(line)) ?? '';
    expect(entry).toContain('pg-settle audit:');
    expect(entry).toContain('"event": "tenant_refused"');
    expect(entry).toContain(`"role": "${role.name}"`);
    expect(entry).toContain('"tenant": "globex"');
  });

  it('a role without grants is a trusted multi-tenant service', async () => {
    const svc = await (await loginRole('multi', ['settle_app'])).connect();
    for (const tenant of ['acme', 'globex', 'initech']) {
      expect((await claim(svc, newOperation('multi', { tenant }))).outcome).toBe('acquired');
    }
  });

  it('grants are per tenant; revoking the last one leaves the role bound to none (fail closed) until it is unbound', async () => {
    const admin = await adminSession();
    const role = await loginRole('two', ['settle_app']);
    await admin.query(`select settle.grant_tenant($1, 'acme'), settle.grant_tenant($1, 'globex')`, [role.name]);
    const svc = await role.connect();
    expect((await claim(svc, newOperation('g', { tenant: 'globex' }))).outcome).toBe('acquired');
    const { rows } = await admin.query(`select settle.revoke_tenant($1, 'globex') as tenants`, [role.name]);
    expect(rows[0].tenants).toEqual(['acme']);
    expect(await sqlStateOf(claim(svc, newOperation('g', { tenant: 'globex' })))).toBe('SE013');
    expect((await claim(svc, newOperation('a', { tenant: 'acme' }))).outcome).toBe('acquired');
    await admin.query(`select settle.revoke_tenant($1, 'acme')`, [role.name]);
    expect(await sqlStateOf(claim(svc, newOperation('a', { tenant: 'acme' })))).toBe('SE013');
    // Explicitly unbinding (tenant => NULL) returns the role to trusted multi-tenant service.
    const unbound = await admin.query(`select settle.revoke_tenant($1, null) as tenants`, [role.name]);
    expect(unbound.rows[0].tenants).toBeNull();
    expect((await claim(svc, newOperation('a', { tenant: 'globex' }))).outcome).toBe('acquired');

    const log = await admin.query(
      `select event, detail->>'role' as role, detail->>'tenant' as tenant from settle.admin_log
                                    where detail->>'role' = $1 order by log_id`,
      [role.name],
    );
    expect(log.rows).toEqual([
      { event: 'grant_tenant', role: role.name, tenant: 'acme' },
      { event: 'grant_tenant', role: role.name, tenant: 'globex' },
      { event: 'revoke_tenant', role: role.name, tenant: 'globex' },
      { event: 'revoke_tenant', role: role.name, tenant: 'acme' },
      { event: 'revoke_tenant', role: role.name, tenant: null },
    ]);
  });

  it('an uncommitted revocation does not bind yet; once committed it binds the very next call (two sessions)', async () => {
    const admin = await adminSession();
    const role = await loginRole('racer', ['settle_app']);
    await admin.query(`select settle.grant_tenant($1, 'acme')`, [role.name]);
    const svc = await role.connect();
    // The revocation commits first; the next statement of the bound session sees it: the check
    // runs per call, against committed grants, never a per-session cache.
    await admin.query('begin');
    await admin.query(`select settle.revoke_tenant($1, 'acme')`, [role.name]);
    expect((await claim(svc, newOperation('race', { tenant: 'acme' }))).outcome).toBe('acquired');
    await admin.query('commit');
    expect(await sqlStateOf(claim(svc, newOperation('race', { tenant: 'acme' })))).toBe('SE013');
  });

  it('only settle_admin grants and revokes; roles must exist and log in', async () => {
    const app = await (await loginRole('app', ['settle_app'])).connect();
    const ro = await (await loginRole('ro', ['settle_readonly'])).connect();
    const admin = await adminSession();
    for (const client of [app, ro]) {
      expect(await sqlStateOf(client.query(`select settle.grant_tenant('postgres', 'acme')`))).toBe('42501');
      expect(await sqlStateOf(client.query(`select settle.revoke_tenant('postgres', 'acme')`))).toBe('42501');
    }
    expect(await sqlStateOf(admin.query(`select settle.grant_tenant('no_such_role_x', 'acme')`))).toBe('SE008');
    expect(await sqlStateOf(admin.query(`select settle.grant_tenant('settle_app', 'acme')`))).toBe('SE008');
    expect(await sqlStateOf(admin.query(`select settle.grant_tenant('postgres', '')`))).toBe('SE001');
  });

  it('a bound settle_readonly role sees only its tenants, in settle.inspect and in the views', async () => {
    const admin = await adminSession();
    const app = await (await loginRole('writer', ['settle_app'])).connect();
    const roRole = await loginRole('acme_ro', ['settle_readonly']);
    await admin.query(`select settle.grant_tenant($1, 'acme')`, [roRole.name]);
    const ro = await roRole.connect();
    const acme = newOperation('v', { tenant: 'acme' });
    const globex = newOperation('v', { tenant: 'globex' });
    await acquire(app, acme);
    await acquire(app, globex);
    expect((await ro.query(`select 1 from settle.inspect($1, $2)`, [acme.tenant, acme.key])).rows).toHaveLength(1);
    expect(await sqlStateOf(ro.query(`select 1 from settle.inspect($1, $2)`, [globex.tenant, globex.key]))).toBe(
      'SE013',
    );
    for (const view of ['operations', 'attempts', 'audit_log', 'dead_letters', 'settlements', 'stats']) {
      const { rows } = await ro.query(`select distinct tenant from settle.${view}`);
      expect(rows.every((r: { tenant: string }) => r.tenant === 'acme')).toBe(true);
    }
  });
});
