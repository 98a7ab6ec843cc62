import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { expect, it } from 'vitest';
import { distribute } from '../../src/db/distribute.js';
import { packageSqlDir } from '../../src/db/migrations-dir.js';
import { citusBuild, citusUrl, describeCitus, useCitus } from './support/cluster.js';

const citus = useCitus();

const REWRITTEN = [
  'settle_private.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean)',
  'settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb)',
  'settle_private._next_seq(text, text)',
];

/**
 * How many times worker `i`'s Citus plans the local shard query of one single-table statement
 * run 20 times from PL/pgSQL in one session, as Citus itself reports it (DEBUG5 "Local shard query
 * that is going to be cached"): 1 where it caches the local plan, once per execution after the
 * first reuses where it does not (Citus 13.2.2). A signal independent of step 12's probe, which
 * measures the cached plans' memory instead.
 */
async function localShardPlansOf(i: number): Promise<number> {
  const w = await citus.worker(i);
  let plans = 0;
  w.on('notice', (n) => {
    if (/Local shard query that is going to be cached/.test(n.message ?? '')) plans++;
  });
  await w.query(`set client_min_messages = debug5`);
  await w.query(`do $p$
    declare
      v_key text;
      v_n bigint;
    begin
      for i in 1 .. 100000 loop
        v_key := 'single-table test ' || i;
        exit when exists (select 1 from pg_dist_placement p
                           where p.shardid = get_shard_id_for_distribution_column('settle_private.operations', v_key)
                             and p.groupid = (select g.groupid from pg_dist_local_group g));
      end loop;
      for i in 1 .. 20 loop
        select count(*) into v_n from settle_private.operations o where o.key = v_key;
      end loop;
    end
    $p$`);
  await w.query(`reset client_min_messages`);
  return plans;
}

/** Per node: which of the three functions carry step 12's rewrite. */
async function rewrittenOn(node: 'coordinator' | number): Promise<string[]> {
  const n = await citus.node(node);
  const { rows } = await n.query<{ fn: string }>(
    `select f as fn from unnest($1::text[]) f join pg_proc p on p.oid = f::regprocedure
      where p.prosrc like '%pg-settle distribute, step 12%'`,
    [REWRITTEN],
  );
  return rows.map((r) => r.fn).sort();
}

const stock = citusBuild === 'installed';
const other = citusBuild !== undefined && citusBuild !== 'installed' && citusBuild !== 'external';

describeCitus(
  'pg-settle distribute, step 12: the hot path as single-table statements only where Citus caches local plans',
  () => {
    it('the probe agrees with what Citus reports on every worker, and distribute rewrote the hot path exactly when every worker caches local plans', async () => {
      const summary = await distribute(citusUrl('coordinator'));
      const plans = [await localShardPlansOf(0), await localShardPlansOf(1)];
      const caches = plans.map((p) => p <= 1);
      expect(summary.hotPath.mode).toBe('auto');
      expect(
        summary.hotPath.localPlansCached,
        `${summary.hotPath.probe} / plans per 20 executions: ${plans.join(', ')}`,
      ).toBe(caches.every(Boolean));
      const expected = caches.every(Boolean) ? [...REWRITTEN].sort() : [];
      expect([...summary.hotPath.rewritten].sort()).toEqual(expected);
      expect(summary.hotPath.leftAsMigrated).toEqual([]);
      for (const node of citus.nodes) expect(await rewrittenOn(node), String(node)).toEqual(expected);
    });

    it('step 12 knows the text of every function it rewrites, as the migrations wrote it (forced on, rolled back): on any build', async () => {
      // A migration that changes claim, complete or _next_seq must update step 12's pieces, or the
      // hot path stays as migrated on a Citus that caches local plans. On 13.2.2 step 12 applies
      // nothing, so this test forces it in a transaction it rolls back, to see what it would do.
      const c = await citus.coordinator();
      const sql = await readFile(path.join(packageSqlDir('citus'), 'single-table.sql'), 'utf8');
      await c.query('begin');
      try {
        await c.query(`set local pg_settle.single_table_statements = 'on'`);
        const results = (await c.query(sql)) as unknown as {
          rows: { step12?: { rewritten: string[]; left_as_migrated: string[] } }[];
        }[];
        const step = results[results.length - 1]?.rows[0]?.step12;
        expect(step?.left_as_migrated, 'functions whose text step 12 does not know').toEqual([]);
        expect([...(step?.rewritten ?? [])].sort()).toEqual([...REWRITTEN].sort());
      } finally {
        await c.query('rollback');
      }
      for (const node of citus.nodes)
        expect(await rewrittenOn(node), String(node)).toEqual(stock ? [] : [...REWRITTEN].sort());
    });

    it.skipIf(!stock)(
      `on the installed Citus 13.2.2 (which re-plans every local shard query) distribute leaves the hot path as migrated${stock ? '' : ' [skipped: the suite runs on ' + String(citusBuild) + ', not the installed Citus]'}`,
      async () => {
        const c = await citus.coordinator();
        const {
          rows: [v],
        } = await c.query<{ version: string }>(
          `select extversion as version from pg_extension where extname = 'citus'`,
        );
        const {
          rows: [full],
        } = await c.query<{ v: string }>(`select citus_version() as v`);
        expect(full?.v).toMatch(/^Citus 13\.2\.2 /);
        expect(v?.version).toMatch(/^13\.2/);
        for (const i of [0, 1])
          expect(
            await localShardPlansOf(i),
            `worker ${i + 1} plans the shard query at every execution after the first reuses`,
          ).toBeGreaterThanOrEqual(10);
        const summary = await distribute(citusUrl('coordinator'));
        expect(summary.hotPath).toMatchObject({ localPlansCached: false, rewritten: [], leftAsMigrated: [] });
        expect(summary.hotPath.probe.match(/pg-settle probe: re-plans local shard queries/g)).toHaveLength(2);
        for (const node of citus.nodes) expect(await rewrittenOn(node), String(node)).toEqual([]);
      },
    );

    it.skipIf(!other)(
      `on a Citus build with citusdata/citus#8824 (PG_SETTLE_CITUS_BIN) distribute rewrites claim, complete and _next_seq on every node${other ? '' : ' [skipped: PG_SETTLE_CITUS_BIN does not name a Citus build with citusdata/citus#8824 (docs/scale-out.md, "The patched Citus")]'}`,
      async () => {
        for (const i of [0, 1]) expect(await localShardPlansOf(i), `worker ${i + 1} caches the local plan`).toBe(1);
        const summary = await distribute(citusUrl('coordinator'));
        expect(summary.hotPath).toMatchObject({ localPlansCached: true, leftAsMigrated: [] });
        expect([...summary.hotPath.rewritten].sort()).toEqual([...REWRITTEN].sort());
        for (const node of citus.nodes) expect(await rewrittenOn(node), String(node)).toEqual([...REWRITTEN].sort());
        // No statement over several tables is left on the path of a claim of a new key and of the
        // lease holder's complete: what made each call plan again.
        const c = await citus.coordinator();
        const { rows } = await c.query<{ fn: string; src: string }>(
          `select f as fn, p.prosrc as src from unnest($1::text[]) f join pg_proc p on p.oid = f::regprocedure`,
          [REWRITTEN],
        );
        for (const r of rows) {
          expect(r.src, r.fn).not.toContain('select s.verdict, s.op,');
          expect(r.src, r.fn).not.toContain('with a as materialized (');
          expect(r.src, r.fn).not.toMatch(/coalesce\(greatest\(\s*\(select/);
        }
        // Nor a volatile function inside a new key's INSERTs (Citus would plan the shard's INSERT
        // again at every call): the lease token and the audit id are drawn before each.
        const claim = rows.find((r) => r.fn.startsWith('settle_private.claim('))?.src ?? '';
        const newKey = claim.slice(claim.indexOf('if v_seen.new_key then'), claim.indexOf("return row('acquired'"));
        expect(newKey).toContain('v_token := gen_random_uuid();');
        expect(newKey).toContain("v_citus_audit_id := nextval('settle_private.audit_log_audit_id_seq');");
        expect(newKey).not.toMatch(/\(tenant, key,[^;]*(gen_random_uuid|nextval)\(/);
      },
    );
  },
);
