import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';

// What the catalog says about privileges, and what settle_app can really do.
const db = useEngineDatabase('security');

const ENGINE_SCHEMAS = `n.nspname in ('settle', 'settle_private')`;
const PRIVATE_TABLES = `select c.oid, c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
                         where n.nspname = 'settle_private' and c.relkind in ('r', 'p')`;

describe('privileges and hardening, from the catalog', () => {
  it('no function in settle or settle_private is executable by PUBLIC', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ fn: string; public_can: boolean }>(
      `select p.oid::regprocedure::text as fn, has_function_privilege('public', p.oid, 'execute') as public_can
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace where ${ENGINE_SCHEMAS}`,
    );
    expect(rows.length).toBeGreaterThan(10);
    expect(rows.filter((r) => r.public_can).map((r) => r.fn)).toEqual([]);
  });

  it('settle_app holds no privilege on any table of settle_private', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ relname: string; any_privilege: boolean }>(
      `select t.relname, has_table_privilege('settle_app', t.oid,
                'select, insert, update, delete, truncate, references, trigger') as any_privilege
         from (${PRIVATE_TABLES}) t`,
    );
    expect(rows.map((r) => r.relname).sort()).toEqual([
      'admin_log',
      'attempts',
      'audit_log',
      'audit_overflow',
      'binding_floors',
      'feed_consumers',
      'feed_events',
      'feed_lanes',
      'feed_waiters',
      'operations',
      'reconciliation_leases',
      'settings',
      'tenant_bindings',
      'upkeep_jobs',
    ]);
    expect(rows.filter((r) => r.any_privilege)).toEqual([]);
  });

  const statements = [
    'select * from settle_private.operations',
    `update settle_private.operations set status = 'completed'`,
    'delete from settle_private.audit_log',
    'truncate settle_private.attempts',
    `insert into settle_private.audit_log (tenant, key, at, event, outcome) values ('t', 'k', now(), 'claim', 'x')`,
    'create table settle.sneaky (id int)',
    'create table settle_private.sneaky (id int)',
    `create function settle.sneaky() returns int language sql as 'select 1'`,
    'alter table settle_private.operations disable trigger _100_guard_lattice',
    'alter table settle_private.audit_log disable trigger all',
  ];
  for (const statement of statements) {
    it(`settle_app is refused (42501): ${statement}`, async () => {
      const app = await db.app();
      expect(await sqlStateOf(app.query(statement))).toBe('42501');
    });
  }

  it('settle_app may not create in the engine schemas', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ schema: string; can_create: boolean }>(
      `select nspname as schema, has_schema_privilege('settle_app', oid, 'create') as can_create
         from pg_namespace where nspname in ('settle', 'settle_private') order by nspname`,
    );
    expect(rows).toEqual([
      { schema: 'settle', can_create: false },
      { schema: 'settle_private', can_create: false },
    ]);
  });

  it('every API function is SECURITY DEFINER with a search_path ending in pg_temp', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ fn: string; secdef: boolean; config: string[] | null }>(
      `select p.oid::regprocedure::text as fn, p.prosecdef as secdef, p.proconfig as config
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace where n.nspname = 'settle'`,
    );
    const names = rows.map((r) => r.fn.replace(/\(.*$/, ''));
    for (const api of [
      'claim',
      'heartbeat',
      'complete',
      'fail',
      'report_unknown',
      'get',
      'inspect',
      'expire_leases',
      'redrive',
      'purge',
      'fingerprint',
      'status_rank',
      'grant_tenant',
      'revoke_tenant',
      'revoke_binding',
    ]) {
      expect(names).toContain(`settle.${api}`);
    }
    const weak = rows.filter((r) => {
      const path = (r.config ?? []).find((c) => c.startsWith('search_path='));
      return !r.secdef || path === undefined || !/(^|[ ,])pg_temp$/.test(path);
    });
    expect(weak).toEqual([]);
  });

  it('every SECURITY DEFINER function of settle_private pins a search_path ending in pg_temp', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ fn: string }>(
      `select p.oid::regprocedure::text as fn
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'settle_private' and p.prosecdef
          and not exists (select 1 from unnest(p.proconfig) c where c ~ '^search_path=.*pg_temp$')`,
    );
    expect(rows).toEqual([]);
  });

  it('row level security is enabled and forced on every table of settle_private', async () => {
    const admin = await db.connect();
    const { rows } = await admin.query<{ relname: string; enabled: boolean; forced: boolean }>(
      `select c.relname, c.relrowsecurity as enabled, c.relforcerowsecurity as forced
         from pg_class c join (${PRIVATE_TABLES}) t on t.oid = c.oid order by c.relname`,
    );
    expect(rows).toEqual([
      { relname: 'admin_log', enabled: true, forced: true },
      { relname: 'attempts', enabled: true, forced: true },
      { relname: 'audit_log', enabled: true, forced: true },
      { relname: 'audit_overflow', enabled: true, forced: true },
      { relname: 'binding_floors', enabled: true, forced: true },
      { relname: 'feed_consumers', enabled: true, forced: true },
      { relname: 'feed_events', enabled: true, forced: true },
      { relname: 'feed_lanes', enabled: true, forced: true },
      { relname: 'feed_waiters', enabled: true, forced: true },
      { relname: 'operations', enabled: true, forced: true },
      { relname: 'reconciliation_leases', enabled: true, forced: true },
      { relname: 'settings', enabled: true, forced: true },
      { relname: 'tenant_bindings', enabled: true, forced: true },
      { relname: 'upkeep_jobs', enabled: true, forced: true },
    ]);
  });
});
