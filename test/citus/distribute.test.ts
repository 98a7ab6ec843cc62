import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { distribute } from '../../src/db/distribute.js';
import { describeCitus, useCitus } from './support/cluster.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const citus = useCitus();

interface FunctionAcl {
  fn: string;
  acl: string | null;
  owner: string;
}

const FUNCTION_ACLS = `
  select p.oid::regprocedure::text as fn, p.proacl::text as acl, p.proowner::regrole::text as owner
    from pg_proc p join pg_namespace n on n.oid = p.pronamespace
   where n.nspname in ('settle', 'settle_private')
   order by 1`;

describeCitus('pg-settle distribute on a coordinator and two workers', () => {
  it('distributes the private tables of operations by key, colocated, the access tables as reference tables, the feed per node, and is idempotent', async () => {
    const c = await citus.coordinator();
    const first = await distribute(urlOf(c));
    const again = await distribute(urlOf(c));
    expect(again).toEqual(first);
    expect(first).toMatchObject({ workers: 2 });
    const { rows } = await c.query<{ rel: string; column: string; colocationid: number }>(
      `select logicalrelid::regclass::text as rel, column_to_column_name(logicalrelid, partkey) as column, colocationid
         from pg_dist_partition where logicalrelid::regclass::text like 'settle\\_private.%' and partmethod = 'h' order by 1`,
    );
    // Every private table keyed by operation (any added later too), colocated on key.
    expect(rows.map((r) => [r.rel, r.column])).toEqual(
      expect.arrayContaining([
        ['settle_private.attempts', 'key'],
        ['settle_private.audit_log', 'key'],
        ['settle_private.audit_overflow', 'key'],
        ['settle_private.operations', 'key'],
      ]),
    );
    expect(rows.every((r) => r.column === 'key')).toBe(true);
    expect(first.tables).toBe(rows.length);
    expect(new Set(rows.map((r) => r.colocationid)).size).toBe(1);
    const reference = await c.query<{ rel: string }>(
      `select logicalrelid::regclass::text as rel from pg_dist_partition where partmethod = 'n' and logicalrelid::regclass::text like 'settle\\_private.%' order by 1`,
    );
    expect(reference.rows.map((r) => r.rel)).toEqual([
      'settle_private.admin_log',
      'settle_private.binding_floors',
      'settle_private.settings',
      'settle_private.tenant_bindings',
    ]);
    // The feed is per node (docs/scale-out.md): its tables are plain tables on every node, not
    // Citus tables, and its trigger fires on every shard, ALWAYS.
    const feedTables = [
      'settle_private.feed_consumers',
      'settle_private.feed_events',
      'settle_private.feed_lanes',
      'settle_private.feed_waiters',
    ];
    for (const node of citus.nodes) {
      const n = await citus.node(node);
      const { rows: local } = await n.query<{ rel: string }>(
        `select c.oid::regclass::text as rel from pg_class c join pg_namespace s on s.oid = c.relnamespace
          where s.nspname = 'settle_private' and c.relname like 'feed\\_%' and c.relkind = 'r'
            and c.oid not in (select logicalrelid from pg_dist_partition) order by 1`,
      );
      expect(
        local.map((r) => r.rel),
        String(node),
      ).toEqual(feedTables);
    }
    const { rows: trigger } = await c.query<{ enabled: string }>(
      `select tgenabled as enabled from pg_trigger where tgrelid = 'settle_private.operations'::regclass and tgname = '_100_guard_lattice'`,
    );
    expect(trigger).toEqual([{ enabled: 'A' }]);
    const { rows: shardTriggers } = await c.query<{ result: string }>(
      `select result from run_command_on_shards('settle_private.operations',
         $$select string_agg(tgenabled::text, ',') from pg_trigger where tgrelid = '%s'::regclass and starts_with(tgname, '_100_guard_lattice')$$)`,
    );
    expect(new Set(shardTriggers.map((r) => r.result))).toEqual(new Set(['A']));
  });

  it('docs/cli.md and docs/scale-out.md print what pg-settle distribute prints (tables, functions, delegated, workers)', async () => {
    const summary = await distribute(urlOf(await citus.coordinator()));
    const line = `distributed ${summary.tables} tables by key and ${summary.functions} functions (${summary.delegated} delegated by key) over ${summary.workers} workers`;
    for (const doc of ['docs/cli.md', 'docs/scale-out.md']) {
      const text = readFileSync(path.join(ROOT, doc), 'utf8');
      const shown =
        text.match(/distributed \d+ tables by key and \d+ functions \(\d+ delegated by key\) over \d+ workers/g) ?? [];
      expect(shown.length, `${doc} shows the distribute summary`).toBeGreaterThan(0);
      // A function added to the engine changes the count: update the example line in both docs.
      for (const s of shown) expect(s, doc).toBe(line);
    }
    // The prose of scale-out.md names the counts too.
    const scaleOut = readFileSync(path.join(ROOT, 'docs/scale-out.md'), 'utf8');
    expect(scaleOut).toContain(`the ${summary.delegated} functions delegated by key`);
  });

  it('distributes every engine function; the STRICT hot path is delegated by key, every other function runs where it is called', async () => {
    const c = await citus.coordinator();
    const { rows } = await c.query<{
      fn: string;
      distributed: boolean;
      arg: string | null;
      keyed: boolean;
      colocated: boolean;
      strict: boolean;
    }>(`
      select p.oid::regprocedure::text as fn,
             o.objid is not null as distributed,
             p.proargnames[o.distribution_argument_index + 1] as arg,
             'key' = any (coalesce(p.proargnames, '{}')) as keyed,
             o.colocationid = (select colocationid from pg_dist_partition
                                where logicalrelid = 'settle_private.operations'::regclass) as colocated,
             p.proisstrict as strict
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        left join pg_dist_object o on o.classid = 'pg_proc'::regclass and o.objid = p.oid
       where n.nspname in ('settle', 'settle_private') and p.prokind = 'f'
       order by 1`);
    expect(rows.length).toBeGreaterThan(20);
    // Only the helper that returns a row of a per-node feed table is not Citus's (it refuses it):
    // distribute creates it on every worker itself.
    const local = rows.filter((r) => !r.distributed).map((r) => r.fn);
    expect(local.map((f) => f.replace(/\(.*/, '')).sort()).toEqual(['settle_private._feed_consumer']);
    for (const i of [0, 1]) {
      const w = await citus.worker(i);
      const { rows: there } = await w.query<{ fn: string | null }>(
        `select to_regprocedure(f)::text as fn from unnest($1::text[]) f`,
        [local],
      );
      expect(there.map((r) => r.fn)).toEqual(local);
    }
    const delegated = rows.filter((r) => r.arg !== null);
    expect(delegated.map((r) => r.fn.replace(/\(.*/, '')).sort()).toEqual([
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
    for (const r of delegated)
      expect({ fn: r.fn, arg: r.arg, colocated: r.colocated, strict: r.strict }).toEqual({
        fn: r.fn,
        arg: 'key',
        colocated: true,
        strict: true,
      });
    // inspect, redrive and the private helpers keep their key argument but are never routed by it.
    expect(rows.filter((r) => r.keyed && r.arg === null).map((r) => r.fn.replace(/\(.*/, ''))).toEqual(
      expect.arrayContaining([
        'settle.claim',
        'settle.inspect',
        'settle.redrive',
        'settle.resolve',
        'settle_private.claim',
        'settle_private.resolve',
      ]),
    );
  });

  it("on every node the access verdict reads the reference tables' local placements, and the hot path reads it through _access (steps 10-11)", async () => {
    // A rewrite that no longer finds its text (a migration changed) leaves the function as the
    // migrations wrote it: correct, but every call plans the copied access subqueries again
    // (docs/scale-out.md, "Where a delegated cycle's CPU goes"). This test names what drifted.
    const c = await citus.coordinator();
    const { rows: shards } = await c.query<{ name: string }>(
      `select 'settle_private.' || c.relname || '_' || s.shardid as name from pg_dist_shard s join pg_class c on c.oid = s.logicalrelid
        where s.logicalrelid in ('settle_private.tenant_bindings'::regclass, 'settle_private.binding_floors'::regclass) order by 1`,
    );
    expect(shards).toHaveLength(2);
    for (const node of citus.nodes) {
      const n = await citus.node(node);
      const {
        rows: [access],
      } = await n.query<{ src: string }>(
        `select prosrc as src from pg_proc where oid = 'settle_private._access(text, text)'::regprocedure`,
      );
      for (const s of shards) expect(access?.src, `${String(node)}: _access reads ${s.name}`).toContain(`${s.name} `);
      const { rows } = await n.query<{ fn: string; copies: boolean; calls: boolean }>(
        `select p.oid::regprocedure::text as fn, p.prosrc ~ 'case when exists \\(select 1 from settle_private\\.tenant_bindings ' as copies,
                (p.prosrc like '%settle_private._access(%pg-settle distribute, step 11%'
                 or p.prosrc like '%pg-settle distribute, step 12%settle_private._access(%') as calls
           from pg_proc p where p.oid in ('settle_private.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean)'::regprocedure,
             'settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb)'::regprocedure,
             'settle_private._observe(text, text, text, integer, uuid, text, text, text[], bigint, jsonb, jsonb, boolean)'::regprocedure) order by 1`,
      );
      expect(rows, String(node)).toHaveLength(3);
      for (const r of rows)
        expect({ fn: r.fn, copies: r.copies, calls: r.calls }, String(node)).toEqual({
          fn: r.fn,
          copies: false,
          calls: true,
        });
    }
  });

  it("every worker's function ACLs equal the coordinator's, and PUBLIC executes nothing anywhere", async () => {
    const c = await citus.coordinator();
    const expected = (await c.query<FunctionAcl>(FUNCTION_ACLS)).rows;
    for (const row of expected)
      expect(`${row.fn} ${row.acl ?? '(default: PUBLIC)'}`).not.toMatch(/[{,]=X\/|\(default: PUBLIC\)/);
    for (const i of [0, 1]) {
      const w = await citus.worker(i);
      const actual = (await w.query<FunctionAcl>(FUNCTION_ACLS)).rows;
      expect(actual).toEqual(expected);
      // And as the privilege check sees it on the worker, for the application's login.
      const { rows } = await w.query<{ fn: string }>(`
        select p.oid::regprocedure::text as fn from pg_proc p join pg_namespace n on n.oid = p.pronamespace
         where n.nspname in ('settle', 'settle_private') and has_function_privilege('settle_citus_app', p.oid, 'execute')
         order by 1`);
      expect(rows.map((r) => r.fn.replace(/\(.*/, '')).sort()).toEqual(
        [
          'settle._claim',
          'settle.claim',
          'settle.claim_many',
          'settle.complete',
          'settle.complete_many',
          'settle.fail',
          'settle.fingerprint',
          'settle.get',
          'settle.heartbeat',
          'settle.report_unknown',
          'settle.status_rank',
        ]
          .filter((f) => expected.some((e) => e.fn.startsWith(`${f}(`)))
          .sort(),
      );
    }
  });

  it('a settle_app login cannot run an admin function through the coordinator (the worker refuses the delegated call)', async () => {
    const app = await citus.coordinator('settle_citus_app');
    await expect(app.query(`select * from settle.redrive('t', 'some-key')`)).rejects.toMatchObject({ code: '42501' });
    await expect(app.query(`select settle.purge(interval '0')`)).rejects.toMatchObject({ code: '42501' });
  });

  it('default privileges on every node keep a function created later closed to PUBLIC', async () => {
    for (const i of [0, 1]) {
      const w = await citus.worker(i);
      const { rows } = await w.query<{ acl: string }>(
        `select defaclacl::text as acl from pg_default_acl where defaclrole = 'settle_owner'::regrole and defaclobjtype = 'f'`,
      );
      expect(rows).toEqual([{ acl: '{settle_owner=X/settle_owner}' }]);
    }
  });

  it('the CLI: pg-settle distribute --json reports the distribution', async () => {
    const c = await citus.coordinator();
    const run = await new Promise<{ code: number; stdout: string }>((resolve) => {
      const env = { ...process.env };
      delete env.DATABASE_URL;
      execFile(
        process.execPath,
        ['--import', 'tsx', path.join(ROOT, 'src/cli/main.ts'), 'distribute', '--json', '--database-url', urlOf(c)],
        { cwd: ROOT, env, timeout: 50_000 },
        (error, stdout) => resolve({ code: error === null ? 0 : Number(error.code ?? -1), stdout }),
      );
    });
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, command: 'distribute', workers: 2, problems: [] });
  }, 60_000);
});

function urlOf(c: {
  connectionParameters?: unknown;
  host: string;
  port: number;
  user?: string;
  database?: string;
}): string {
  return `postgresql://${c.user ?? 'postgres'}@${c.host}:${c.port}/${c.database ?? 'postgres'}`;
}
