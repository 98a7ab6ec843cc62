import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BENCH_DIR } from '../../bench/lib/database.js';
import { scriptPath } from '../../bench/lib/measure.js';
import { locatePgbench, runPgbench } from '../../bench/lib/pgbench.js';
import { loadScript } from '../../bench/lib/script-runner.js';
import { verifySpec4 } from '../../bench/lib/verify.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// The spec4 baseline (bench/sql/baselines.sql, bench/scripts/spec4.sql): the engine tables'
// shapes (CREATE TABLE ... LIKE, plus the fillfactors) without triggers, RLS or
// validation, written by plain SQL; its script runs under pgbench exactly as the runner drives
// it, and its correctness check sees what it wrote: as in the engine, the operation row logs the
// claim and the settlement, and spec4_attempts and spec4_audit_log stay empty.

const TABLES = ['operations', 'attempts', 'audit_log'] as const;
const pgbench = locatePgbench();
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase('bench_spec4');
  const baselines = await readFile(path.join(BENCH_DIR, 'sql', 'baselines.sql'), 'utf8');
  await withPgClient(db.url, (c) => c.query(baselines));
});

afterAll(async () => {
  await db?.drop();
});

/** Column, index and constraint text without the names that differ between engine and copy. */
const normalize = (sql: string): string =>
  sql
    .replace(/^CREATE (UNIQUE )?INDEX \S+ ON/, 'CREATE $1INDEX ON')
    .replaceAll('bench.spec4_', '')
    .replaceAll('settle_private.', '')
    .replaceAll('spec4_', '')
    // The engine's audit event is of a validating domain (audit_event); the copy's is plain text.
    .replace(/^event audit_event /, 'event text ')
    // ... so a predicate on it is rendered with a cast on the engine's side only.
    .replaceAll('(event)::text', 'event');

interface TableShape {
  readonly columns: string[];
  readonly indexes: string[];
  readonly foreignKeys: string[];
  readonly reloptions: string | null;
}

async function shapeOf(c: pg.Client, schema: string, table: string): Promise<TableShape> {
  const columns = await c.query<{ d: string }>(
    `select format('%s %s %s %s %s', a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
                   pg_get_expr(d.adbin, d.adrelid)) as d
       from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where a.attrelid = format('%I.%I', $1::text, $2::text)::regclass and a.attnum > 0 and not a.attisdropped
      order by a.attnum`,
    [schema, table],
  );
  const indexes = await c.query<{ d: string }>(
    `select pg_get_indexdef(indexrelid) as d from pg_index
      where indrelid = format('%I.%I', $1::text, $2::text)::regclass order by 1`,
    [schema, table],
  );
  const fks = await c.query<{ d: string }>(
    `select pg_get_constraintdef(oid) as d from pg_constraint
      where conrelid = format('%I.%I', $1::text, $2::text)::regclass and contype = 'f' order by 1`,
    [schema, table],
  );
  const rel = await c.query<{ reloptions: string | null }>(
    `select array_to_string(reloptions, ',') as reloptions from pg_class where oid = format('%I.%I', $1::text, $2::text)::regclass`,
    [schema, table],
  );
  return {
    columns: columns.rows.map((r) => normalize(r.d)),
    indexes: indexes.rows.map((r) => normalize(r.d)).sort(),
    foreignKeys: fks.rows.map((r) => normalize(r.d)),
    reloptions: rel.rows[0]?.reloptions ?? null,
  };
}

describe('spec4 tables', () => {
  it.each(TABLES)(
    'bench.spec4_%s has the shape of settle_private.%s: columns, keys, indexes, FK, fillfactor',
    async (table) => {
      await withPgClient(db.url, async (c) => {
        const engine = await shapeOf(c, 'settle_private', table);
        const copy = await shapeOf(c, 'bench', `spec4_${table}`);
        expect(copy).toEqual(engine);
        expect(copy.columns.length).toBeGreaterThan(10);
        expect(copy.indexes.length).toBeGreaterThan(0);
      });
    },
  );

  it('carries no trigger, row rule, RLS or CHECK', async () => {
    await withPgClient(db.url, async (c) => {
      const extras = await c.query<{ triggers: string; rls: boolean; checks: string }>(
        `select (select count(*) from pg_trigger t where t.tgrelid = r.oid and not t.tgisinternal)::text as triggers,
                r.relrowsecurity as rls,
                (select count(*) from pg_constraint k where k.conrelid = r.oid and k.contype = 'c')::text as checks
           from pg_class r
          where r.relnamespace = 'bench'::regnamespace and r.relname like 'spec4\\_%' and r.relkind = 'r'`,
      );
      expect(extras.rows).toHaveLength(3);
      for (const row of extras.rows) expect(row).toEqual({ triggers: '0', rls: false, checks: '0' });
    });
  });
});

describe.skipIf(pgbench === undefined)('spec4 script under pgbench', () => {
  it('writes one completed operation per transaction that logs the claim and the settlement, no attempts or audit row, and verifySpec4 agrees', async () => {
    const run = await runPgbench({
      pgbench: pgbench as string,
      url: db.url,
      script: scriptPath('spec4.sql'),
      clients: 2,
      threads: 1,
      transactionsPerClient: 25,
      protocol: 'prepared',
      maxTries: 3,
    });
    expect(run.output).toMatchObject({ processed: 50, failed: 0, aborted: false });
    await withPgClient(db.url, async (c) => {
      const verification = await verifySpec4(c, { processed: 50, maxInFlight: 2 });
      expect(verification.checks.filter((check) => !check.ok)).toEqual([]);
      expect(verification.counters).toMatchObject({ completed: 50, open: 0, auditRows: 0 });
      // The operation row logs both events of the cycle, as the engine's does (00008, 00010).
      const logged = await c.query<Record<string, string | null>>(
        `select claim_seq::text, claim_status_before::text, claim_status_after::text, settled_seq::text,
                settled_status_before::text, settled_reason, settled_attempt::text,
                count(*)::text as n, count(distinct claim_audit_id)::text as claim_ids,
                count(distinct settled_audit_id)::text as settled_ids,
                count(*) filter (where settled_audit_id > claim_audit_id)::text as settled_after_claim
           from bench.spec4_operations group by 1, 2, 3, 4, 5, 6, 7`,
      );
      expect(logged.rows).toEqual([
        {
          claim_seq: '1',
          claim_status_before: null,
          claim_status_after: 'running',
          settled_seq: '2',
          settled_status_before: 'running',
          settled_reason: 'current_attempt',
          settled_attempt: '1',
          n: '50',
          claim_ids: '50',
          settled_ids: '50',
          settled_after_claim: '50',
        },
      ]);
      const rows = await c.query<{ n: string }>(
        `select ((select count(*) from bench.spec4_audit_log) + (select count(*) from bench.spec4_attempts))::text as n`,
      );
      expect(rows.rows).toEqual([{ n: '0' }]);
      const fingerprints = await c.query<{ ok: boolean }>(
        `select bool_and(fingerprint ~ '^v1:[0-9a-f]{64}$' and lease_token is null and settled_attempt = 1) as ok from bench.spec4_operations`,
      );
      expect(fingerprints.rows[0]?.ok).toBe(true);

      // A broken invariant is reported: a settlement no longer logged, an audit row.
      await c.query(
        `update bench.spec4_operations set settled_reason = null where (tenant, key) = (select tenant, key from bench.spec4_operations limit 1)`,
      );
      await c.query(
        `insert into bench.spec4_audit_log (tenant, key, seq, at, event, outcome) values ('bench', 'no-such-op', 1, now(), 'claim', 'acquired')`,
      );
      const broken = await verifySpec4(c, { processed: 50, maxInFlight: 2 });
      expect(broken.checks.filter((check) => !check.ok).map((check) => check.name)).toEqual([
        'every completed operation: settled through attempt 1, its claim and settlement logged on it',
        'no attempts row and nothing in spec4_audit_log',
      ]);
    });
  });

  it('returns no row, so pgbench aborts, when a transaction writes nothing', async () => {
    const script = await loadScript('spec4.sql');
    expect(script.statements.map((st) => st.gset)).toEqual([true, true]);
    const [claim, complete] = script.statements;
    await withPgClient(db.url, async (c) => {
      const values = (st: typeof claim, vars: Record<string, string>): string[] =>
        (st?.params ?? []).map((p) => vars[p] ?? '');
      // A complete of a key that was never claimed updates nothing and answers no row.
      const vars = { k: '100000000001', client_id: '7', attempt: '1' };
      const none = await c.query({ text: complete?.text ?? '', values: values(complete, vars) });
      expect(none.rows).toEqual([]);
      // Claimed and completed once: a second complete finds no running operation.
      const claimed = await c.query({ text: claim?.text ?? '', values: values(claim, vars) });
      expect(claimed.rows).toEqual([{ attempt: 1 }]);
      const settled = await c.query({ text: complete?.text ?? '', values: values(complete, vars) });
      expect(settled.rows).toEqual([{ complete_reason: 'current_attempt' }]);
      const again = await c.query({ text: complete?.text ?? '', values: values(complete, vars) });
      expect(again.rows).toEqual([]);
    });
  });
});
