import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { expect, it } from 'vitest';
import { describeCitus, useCitus } from './support/cluster.js';
import { LOGIN_ROLES } from './support/roles.js';

// Citus 13.2 hashes the distribution argument of a delegated call while it plans
// the call (before any permission check) without testing it for NULL, and a NULL key crashed the
// node. sql/citus/distribute.sql delegates only STRICT functions (PostgreSQL folds a call with a
// NULL constant away first) and settle.claim through the STRICT settle._claim. Here every function
// of settle and settle_private is called with NULL in each argument in turn (the others set), as a
// constant, as a bound parameter of a prepared statement and in the target list, by every role that
// can log in, on the coordinator and straight on every worker; then every node must still be the
// same postmaster (none restarted) and every session still connected.
const citus = useCitus();

const USERS = ['postgres', 'settle_owner', ...Object.keys(LOGIN_ROLES)] as const;

interface Fn {
  readonly fn: string;
  readonly name: string;
  readonly schema: string;
  readonly types: readonly string[];
  readonly labels: readonly (string | null)[];
}

/** A non-NULL value of each argument type (a string PostgreSQL casts to it), or null where none is at hand (composite types). */
function valueOf(type: string, label: string | null, tenant: string): string | null {
  if (label !== null) return label; // an enum: its first label
  switch (type) {
    case 'text':
      return tenant;
    case 'jsonb':
    case 'json':
      return '{}';
    case 'text[]':
      return '{}';
    case 'bigint':
    case 'integer':
    case 'smallint':
      return '1';
    case 'interval':
      return '30 seconds';
    case 'uuid':
      return '00000000-0000-4000-8000-000000000000';
    case 'timestamp with time zone':
      return '2026-01-01 00:00:00+00';
    case 'boolean':
      return 'false';
    default:
      return null;
  }
}

const literal = (value: string | null, type: string): string =>
  value === null ? `NULL::${type}` : `'${value.replaceAll("'", "''")}'::${type}`;

/** Connection-level failures: the session (or its node) is gone, not a refusal. */
function isConnectionLoss(error: unknown): boolean {
  const e = error as { code?: string; message?: string };
  if (e.code === undefined) return true;
  return /^(08|57P)/.test(e.code) || /terminat|server closed|ECONNRESET|Connection terminated/i.test(e.message ?? '');
}

async function postmasterStarts(): Promise<string[]> {
  const starts: string[] = [];
  for (const n of citus.nodes) {
    const c = await citus.node(n);
    starts.push(String((await c.query<{ t: string }>('select pg_postmaster_start_time()::text as t')).rows[0]?.t));
  }
  return starts;
}

async function callEveryWay(c: pg.Client, f: Fn, tenant: string, where: string): Promise<number> {
  let calls = 0;
  const values = f.types.map((t, i) => valueOf(t, f.labels[i] ?? null, tenant));
  for (let i = 0; i < f.types.length; i++) {
    const args = f.types.map((t, j) => literal(j === i ? null : (values[j] ?? null), t));
    const params = f.types.map((t, j) => `$${j + 1}::${t}`);
    const bound = values.map((v, j) => (j === i ? null : v));
    const statements: [string, (string | null)[]][] = [
      [`select * from ${f.fn}(${args.join(', ')})`, []],
      [`select * from ${f.fn}(${params.join(', ')})`, bound],
    ];
    if (f.schema === 'settle') statements.push([`select ${f.fn}(${args.join(', ')})`, []]);
    for (const [sql, bind] of statements) {
      calls++;
      try {
        await c.query(sql, bind);
      } catch (error) {
        if (isConnectionLoss(error)) {
          throw new Error(`${where}: ${sql} [${bind.join(', ')}] lost the connection: ${(error as Error).message}`);
        }
      }
    }
  }
  return calls;
}

describeCitus('no call by any role with any NULL argument crashes a node', () => {
  it('every function of settle and settle_private, NULL in each argument, as a constant and as a parameter, by every login, on every node', async () => {
    const su = await citus.coordinator();
    const { rows: fns } = await su.query<{
      fn: string;
      name: string;
      schema: string;
      types: string[];
      labels: (string | null)[];
    }>(`
      select n.nspname || '.' || p.proname as fn, p.proname as name, n.nspname as schema,
             array(select pg_catalog.format_type(t, null) from unnest(p.proargtypes::oid[]) with ordinality a(t, i) order by i) as types,
             array(select (select e.enumlabel from pg_enum e where e.enumtypid = t order by e.enumsortorder limit 1)
                     from unnest(p.proargtypes::oid[]) with ordinality a(t, i) order by i) as labels
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname in ('settle', 'settle_private') and p.prokind = 'f' and p.pronargs > 0
         and p.prorettype <> 'trigger'::regtype
       order by 1, 4`);
    expect(fns.length).toBeGreaterThan(40);
    // The calls that crashed a node (a NULL distribution argument) are among them.
    for (const name of [
      'settle.claim',
      'settle.get',
      'settle.heartbeat',
      'settle.complete',
      'settle.report_unknown',
      'settle.inspect',
      'settle.redrive',
    ]) {
      expect(fns.map((f) => f.fn)).toContain(name);
    }
    const before = await postmasterStarts();
    const tenant = `nulls-${randomBytes(3).toString('hex')}`;
    let calls = 0;
    for (const node of citus.nodes) {
      // One session per login on this node, each running every function; the sessions run side by side.
      const counts = await Promise.all(
        USERS.map(async (user) => {
          const c = await citus.node(node, user);
          let n = 0;
          for (const f of fns)
            n += await callEveryWay(
              c,
              f,
              tenant,
              `${user} on ${node === 'coordinator' ? 'the coordinator' : `worker ${node}`}`,
            );
          await c.query('select 1'); // still connected
          return n;
        }),
      );
      calls += counts.reduce((a, b) => a + b, 0);
    }
    expect(calls).toBeGreaterThan(1000);
    expect(await postmasterStarts(), 'no node restarted').toEqual(before);
  }, 600_000);

  it('a NULL key answers a row of NULLs on Citus and writes nothing, as a constant or a parameter, through the coordinator and a worker', async () => {
    const app = await citus.coordinator('settle_citus_app');
    const worker = await citus.node(0, 'settle_citus_app');
    const reader = await citus.coordinator('settle_citus_readonly');
    const admin = await citus.coordinator('settle_citus_admin');
    for (const c of [app, worker]) {
      const { rows } = await c.query(`select outcome, status, attempt from settle.claim('acme', NULL, '{}', 'p')`);
      expect(rows).toEqual([{ outcome: null, status: null, attempt: null }]);
      const prepared = await c.query({
        name: 'claim-null',
        text: 'select outcome from settle.claim($1, $2, $3::jsonb, $4)',
        values: ['acme', null, '{}', 'p'],
      });
      expect(prepared.rows).toEqual([{ outcome: null }]);
      expect((await c.query(`select outcome from settle.heartbeat('acme', NULL, 1, gen_random_uuid())`)).rows).toEqual([
        { outcome: null },
      ]);
      expect(
        (
          await c.query(
            `select outcome from settle.claim('acme', 'k-null-rerun', '{}', 'p', rerun_after_unknown => NULL)`,
          )
        ).rows,
      ).toEqual([{ outcome: null }]);
      expect((await c.query(`select outcome from settle.get('acme', NULL, '{}', 'p')`)).rows).toEqual([
        { outcome: null },
      ]);
    }
    // Without EXECUTE settle.claim is not inlined and refused, NULL key or not; settle._claim's
    // folded call runs nothing, and with a key the worker refuses it.
    await expect(reader.query(`select outcome from settle.claim('acme', NULL, '{}', 'p')`)).rejects.toMatchObject({
      code: '42501',
    });
    await expect(reader.query(`select outcome from settle.claim('acme', 'k', '{}', 'p')`)).rejects.toMatchObject({
      code: '42501',
    });
    expect(
      (await reader.query(`select outcome from settle._claim('acme', NULL, '{}', 'p', '{}', 0, '30 s', '{}', 5, true)`))
        .rows,
    ).toEqual([{ outcome: null }]);
    await expect(
      reader.query(`select outcome from settle._claim('acme', 'k', '{}', 'p', '{}', 0, '30 s', '{}', 5, true)`),
    ).rejects.toMatchObject({ code: '42501' });
    // inspect and redrive are not delegated: they answer as on plain PostgreSQL (no row; SE002).
    expect((await reader.query(`select * from settle.inspect('acme', NULL)`)).rows).toEqual([]);
    await expect(admin.query(`select * from settle.redrive('acme', NULL)`)).rejects.toMatchObject({ code: 'SE002' });
    const su = await citus.coordinator();
    const { rows } = await su.query<{ n: number }>(
      `select count(*)::int as n from settle_private.operations where key is null`,
    );
    expect(rows).toEqual([{ n: 0 }]);
  });

  it('only STRICT functions that return one row are delegated by key; settle.claim and settle.resolve are inlined into calls of settle._claim and settle._resolve', async () => {
    const su = await citus.coordinator();
    const { rows } = await su.query<{ fn: string; strict: boolean; retset: boolean; force: boolean }>(`
      select p.oid::regprocedure::text as fn, p.proisstrict as strict, p.proretset as retset, coalesce(o.force_delegation, false) as force
        from pg_dist_object o join pg_proc p on o.classid = 'pg_proc'::regclass and o.objid = p.oid
       where o.distribution_argument_index is not null order by 1`);
    expect(rows.map((r) => r.fn.replace(/\(.*/, '')).sort()).toEqual([
      'settle._claim',
      'settle._resolve',
      'settle.complete',
      'settle.fail',
      'settle.get',
      'settle.heartbeat',
      'settle.report_unknown',
      'settle_private._dead_letter_in_doubt_key',
      'settle_private._expire_key',
      'settle_private._purge_key',
      'settle_private._purge_tombstone',
    ]);
    for (const r of rows)
      expect({ fn: r.fn, strict: r.strict, retset: r.retset }).toEqual({ fn: r.fn, strict: true, retset: false });
    const resolvePlan = await su.query<{ 'QUERY PLAN': string }>(
      `explain (verbose, costs off) select * from settle.resolve('acme', 'plan-k', 'v1:${'0'.repeat(64)}', 1, 'failed', 'r')`,
    );
    expect(resolvePlan.rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/settle\._resolve\(/);
    const plan = await su.query<{ 'QUERY PLAN': string }>(
      `explain (verbose, costs off) select * from settle.claim('acme', 'plan-k', '{}', 'p')`,
    );
    expect(plan.rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/settle\._claim\(/);
  });
});
