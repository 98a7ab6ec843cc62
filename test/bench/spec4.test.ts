import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BENCH_DIR } from '../../bench/database.js';
import { scriptPath } from '../../bench/measure.js';
import { locatePgbench, runPgbench } from '../../bench/pgbench.js';
import { verifySpec4 } from '../../bench/verify.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// The spec4 baseline (bench/sql/baselines.sql, bench/scripts/spec4.sql): the engine tables'
// shapes (CREATE TABLE ... LIKE, plus the FK and fillfactors) without triggers, RLS or
// validation, written by plain SQL; its script runs under pgbench exactly as the runner drives
// it, and its correctness check sees what it wrote.

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
    .replace(/^event audit_event /, 'event text ');

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
  it.each(TABLES)('bench.spec4_%s has the shape of settle_private.%s: columns, keys, indexes, FK, fillfactor', async (table) => {
    await withPgClient(db.url, async (c) => {
      const engine = await shapeOf(c, 'settle_private', table);
      const copy = await shapeOf(c, 'bench', `spec4_${table}`);
      expect(copy).toEqual(engine);
      expect(copy.columns.length).toBeGreaterThan(10);
      expect(copy.indexes.length).toBeGreaterThan(0);
    });
  });

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
  it('writes one completed operation, one settled attempt and two audit rows per transaction, and verifySpec4 agrees', async () => {
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
      expect(verification.counters).toMatchObject({ completed: 50, open: 0 });
      const audit = await c.query<{ event: string; outcome: string; status_before: string | null; status_after: string; n: string }>(
        `select event, outcome, status_before::text, status_after::text, count(*)::text as n
           from bench.spec4_audit_log group by 1, 2, 3, 4 order by 1`,
      );
      expect(audit.rows).toEqual([
        { event: 'claim', outcome: 'acquired', status_before: null, status_after: 'running', n: '50' },
        { event: 'complete', outcome: 'settled', status_before: 'running', status_after: 'completed', n: '50' },
      ]);
      const fingerprints = await c.query<{ ok: boolean }>(
        `select bool_and(fingerprint ~ '^v1:[0-9a-f]{64}$' and lease_token is null and settled_attempt = 1) as ok from bench.spec4_operations`,
      );
      expect(fingerprints.rows[0]?.ok).toBe(true);

      // A broken invariant is reported: an attempt that lost its settlement, an audit row without an operation.
      await c.query(`update bench.spec4_attempts set settled = false where (tenant, key) = (select tenant, key from bench.spec4_attempts limit 1)`);
      await c.query(`insert into bench.spec4_audit_log (tenant, key, seq, at, event, outcome) values ('bench', 'no-such-op', 1, now(), 'claim', 'acquired')`);
      const broken = await verifySpec4(c, { processed: 50, maxInFlight: 2 });
      expect(broken.checks.filter((check) => !check.ok).map((check) => check.name)).toEqual([
        'every completed operation: one settled attempt, claim and complete audit rows',
        'no audit row without its operation',
      ]);
    });
  });
});
