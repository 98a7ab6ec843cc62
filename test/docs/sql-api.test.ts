// Keeps docs/sql-api.md and docs/errors.md honest against the migrated database: every public
// function and view carries its contract as a comment, every signature in the doc is the one
// pg_proc prints (and none is stale), every view and result type column is documented, and the
// error registry lists exactly the SE codes the migrations raise.
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { errorRegistry, seCodesIn, signatureLines, tableColumnsUnder } from './markdown.js';

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const migrationsDir = process.env.PG_SETTLE_MIGRATIONS_DIR ?? defaultMigrationsDir();

interface FunctionRow {
  name: string;
  args: string;
  result: string;
  comment: string | null;
}
interface RelationRow {
  name: string;
  kind: 'view' | 'type';
  columns: string[];
  comment: string | null;
}

let db: TestDatabase;
let functions: FunctionRow[];
let relations: RelationRow[];
let sqlApiDoc: string;
let errorsDoc: string;

beforeAll(async () => {
  db = await createTestDatabase('sql_api_docs');
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    functions = (
      await client.query<FunctionRow>(`
        select p.proname as name, pg_get_function_arguments(p.oid) as args,
               pg_get_function_result(p.oid) as result, obj_description(p.oid, 'pg_proc') as comment
          from pg_proc p
         where p.pronamespace = 'settle'::regnamespace
         order by p.proname, p.oid`)
    ).rows;
    relations = (
      await client.query<RelationRow>(`
        select c.relname as name, case c.relkind when 'v' then 'view' else 'type' end as kind,
               array_agg(a.attname::text order by a.attnum) as columns,
               case c.relkind when 'v' then obj_description(c.oid, 'pg_class')
                              else obj_description(c.reltype, 'pg_type') end as comment
          from pg_class c
          join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
         where c.relnamespace = 'settle'::regnamespace and c.relkind in ('v', 'c')
         group by c.oid
         order by c.relname`)
    ).rows;
  } finally {
    await client.end();
  }
  sqlApiDoc = await readFile(path.join(repoRoot, 'docs/sql-api.md'), 'utf8');
  errorsDoc = await readFile(path.join(repoRoot, 'docs/errors.md'), 'utf8');
});

afterAll(async () => {
  await db?.drop();
});

describe('comments in the database', () => {
  it('finds the public API (guards the queries below against an empty schema)', () => {
    expect(functions.map((f) => f.name)).toEqual(expect.arrayContaining(['claim', 'complete', 'purge']));
    expect(relations.filter((r) => r.kind === 'view').map((r) => r.name)).toContain('operations');
  });

  it('every function in schema settle has a COMMENT whose first line is a summary, then its contract', () => {
    for (const fn of functions) {
      const comment = fn.comment ?? '';
      const [summary = '', ...rest] = comment.split('\n');
      expect(summary, `settle.${fn.name}: first line of COMMENT ON FUNCTION`).toMatch(/^[A-Z].*\S\.$/);
      expect(rest.length, `settle.${fn.name}: contract lines after the summary`).toBeGreaterThan(0);
      for (const part of ['Parameters:', 'Outcomes', 'Locking:', 'Idempotency:']) {
        expect(comment, `settle.${fn.name}: comment mentions ${part}`).toContain(part);
      }
    }
  });

  it('every view and result type in schema settle has a comment', () => {
    for (const rel of relations) {
      expect(rel.comment?.trim() ?? '', `settle.${rel.name} (${rel.kind})`).not.toBe('');
    }
  });
});

describe('docs/sql-api.md', () => {
  it("states each function's signature exactly as pg_proc prints it, once, under its own heading", () => {
    const documented = signatureLines(sqlApiDoc);
    for (const fn of functions) {
      const expected = `settle.${fn.name}(${fn.args}) RETURNS ${fn.result}`;
      expect(
        documented.map((d) => d.line),
        `signature of settle.${fn.name}`,
      ).toContain(expected);
      expect(
        documented.filter((d) => d.name === fn.name),
        `settle.${fn.name} documented once`,
      ).toHaveLength(1);
      expect(sqlApiDoc, `section for settle.${fn.name}`).toMatch(new RegExp(`^## settle\\.${fn.name}$`, 'm'));
    }
  });

  it('has no stale signature: every documented signature is a real function', () => {
    const real = new Set(functions.map((fn) => `settle.${fn.name}(${fn.args}) RETURNS ${fn.result}`));
    const stale = signatureLines(sqlApiDoc).filter((d) => !real.has(d.line));
    expect(stale.map((d) => d.line)).toEqual([]);
  });

  it('documents every column of every view and result type, in order', () => {
    for (const rel of relations) {
      const documented = tableColumnsUnder(sqlApiDoc, `\`settle.${rel.name}\` (${rel.kind})`);
      expect(documented, `section for settle.${rel.name} (${rel.kind})`).toBeDefined();
      expect(documented, `columns of settle.${rel.name}`).toEqual(rel.columns);
    }
  });

  it('mentions only SE codes that are in the registry', () => {
    const registered = new Set(errorRegistry(errorsDoc).map((row) => row.code));
    expect(seCodesIn(sqlApiDoc).filter((code) => !registered.has(code))).toEqual([]);
  });
});

describe('docs/errors.md', () => {
  it('lists exactly the SE codes raised in sql/migrations and sql/citus, each once with a snake_case name', async () => {
    // The migrations, and the Citus distribution script that `pg-settle distribute` runs.
    const citusDir = path.join(repoRoot, 'sql', 'citus');
    const files = [
      ...(await readdir(migrationsDir))
        .filter((f) => f.endsWith('.sql'))
        .sort()
        .map((f) => path.join(migrationsDir, f)),
      ...(await readdir(citusDir))
        .filter((f) => f.endsWith('.sql'))
        .sort()
        .map((f) => path.join(citusDir, f)),
    ];
    const sources = await Promise.all(files.map((f) => readFile(f, 'utf8')));
    // Codes appear as `errcode = 'SE...'`, `_raise('SE...'` and as the code argument of the
    // _check_* helpers: any quoted SE literal is a raised code.
    // SE098 and SE099 are the batches' internal signals, raised and caught inside one call (00016);
    // errors.md says they never reach a caller instead of listing them.
    const internal = ['SE098', 'SE099'];
    expect(errorsDoc).toContain('**SE098 and SE099 never reach a caller**');
    const raised = [...new Set(sources.flatMap((src) => [...src.matchAll(/'(SE\d{3})'/g)].map((m) => m[1] ?? '')))]
      .filter((code) => !internal.includes(code))
      .sort();
    expect(raised.length).toBeGreaterThan(0);

    const registry = errorRegistry(errorsDoc);
    const codes = registry.map((row) => row.code);
    expect(new Set(codes).size, 'codes are unique').toBe(codes.length);
    expect([...codes].sort()).toEqual(raised);
    for (const row of registry) expect(row.name, row.code).toMatch(/^[a-z][a-z0-9]*(_[a-z0-9]+)*$/);
    expect(new Set(registry.map((row) => row.name)).size, 'names are unique').toBe(registry.length);
  });
});
