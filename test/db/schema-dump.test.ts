import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { dumpSettleSchema, findPgDump, normalizeSchemaDump, SCHEMA_HEADER } from '../../src/db/schema-dump.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// sql/schema.sql is the whole current schema, generated (npm run schema): it must be exactly
// what the migrations produce in a fresh database, or a DBA reads a stale engine.
const schemaFile = path.join(path.dirname(defaultMigrationsDir()), 'schema.sql');
const pgDump = findPgDump();
let db: TestDatabase | undefined;

beforeAll(async () => {
  if (pgDump === undefined) return;
  db = await createTestDatabase('schema_dump', { template: 'template0' });
  await migrate(db.url);
});
afterAll(async () => {
  await db?.drop();
});

describe('sql/schema.sql', () => {
  it('equals pg_dump of a freshly migrated database (run `npm run schema` after changing sql/migrations)', async (ctx) => {
    ctx.skip(pgDump === undefined, 'pg_dump is not installed (postgresql-client-15); set PG_DUMP to its path');
    if (db === undefined) throw new Error('no database');
    const dumped = await dumpSettleSchema(db.url, pgDump);
    const committed = await readFile(schemaFile, 'utf8');
    expect(dumped.split('\n').length).toBeGreaterThan(500);
    // Compared line by line so a drift shows as a readable diff.
    expect(committed.split('\n')).toEqual(dumped.split('\n'));
  });

  it('holds every function, table and view of the engine', async () => {
    const committed = await readFile(schemaFile, 'utf8');
    for (const object of [
      'FUNCTION settle.claim(',
      'FUNCTION settle_private._observe(',
      'TABLE settle_private.operations',
      'VIEW settle.dead_letters',
      'TRIGGER _100_guard_lattice',
      'POLICY owner_only',
    ]) {
      expect(committed, object).toContain(object);
    }
  });

  it('normalization drops only what varies between runs and pg_dump builds', () => {
    const raw = [
      '\\restrict AbC123',
      '-- Dumped from database version 15.18',
      '-- Dumped by pg_dump version 15.18',
      'SET statement_timeout = 0;',
      "SELECT pg_catalog.set_config('search_path', '', false);",
      '',
      '',
      '',
      'CREATE SCHEMA settle;   ',
      '\\unrestrict AbC123',
    ].join('\n');
    expect(normalizeSchemaDump(raw)).toBe(`${SCHEMA_HEADER}\nCREATE SCHEMA settle;\n`);
  });
});
