import { cp, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, MigrationError, MigrationHistoryError } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { runCli } from '../support/cli.js';

// A database whose applied migrations differ from the files at hand is refused with its own
// error, naming each file and both hashes, applying nothing: an applied file edited (a database
// migrated by a pre-release build), replaced by a file of another name, or missing here (the
// database was migrated by a newer version, which postgres-migrations alone would not notice).
// The template these databases are cloned from was migrated from this directory.
const SOURCE = process.env.PG_SETTLE_MIGRATIONS_DIR ?? defaultMigrationsDir();

let db: TestDatabase;
let dir: string;

async function query<T extends pg.QueryResultRow>(sql: string): Promise<T[]> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** A fresh copy of the migrations directory, the one the template was migrated from. */
async function copyOfMigrations(): Promise<{ dir: string; files: string[] }> {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-history-'));
  await cp(SOURCE, dir, { recursive: true });
  return { dir, files: (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort() };
}

async function refusal(migrationsDir: string): Promise<MigrationHistoryError> {
  const error = await migrate(db.url, { dir: migrationsDir }).catch((e: unknown) => e);
  expect(error).toBeInstanceOf(MigrationHistoryError);
  expect(error).toBeInstanceOf(MigrationError);
  return error as MigrationHistoryError;
}

beforeAll(async () => {
  db = await createTestDatabase('history');
});

afterAll(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  await db?.drop();
});

describe('migrate() on a history that does not match the files', () => {
  it('the same files: up to date, nothing applied', async () => {
    const { dir: copy } = await copyOfMigrations();
    await expect(migrate(db.url, { dir: copy })).resolves.toMatchObject({ applied: [] });
  });

  it('an applied file edited: MigrationHistoryError with the file, both hashes and what to do', async () => {
    const { dir: copy, files } = await copyOfMigrations();
    const third = files[2]!;
    const [applied] = await query<{ hash: string }>('select hash from migrations where id = 3');
    await writeFile(path.join(copy, third), `${await readFile(path.join(copy, third), 'utf8')}\n-- edited\n`);

    const error = await refusal(copy);
    expect(error.code).toBe('MIGRATION_HISTORY_MISMATCH');
    expect(error.mismatches).toHaveLength(1);
    expect(error.mismatches[0]).toMatchObject({
      problem: 'edited',
      id: 3,
      appliedFile: third,
      appliedHash: applied!.hash,
      file: third,
      fileHash: expect.stringMatching(/^[0-9a-f]{40}$/),
    });
    expect(error.mismatches[0]!.fileHash).not.toBe(applied!.hash);
    expect(error.message).toContain(third);
    expect(error.detail).toContain(applied!.hash);
    expect(error.detail).toContain(error.mismatches[0]!.fileHash);
    expect(error.hint).toMatch(/append-only/);
    expect(error.hint).toMatch(/never edit an applied migration/);
  });

  it('a file renamed under an applied number: replaced, named by both file names', async () => {
    const { dir: copy, files } = await copyOfMigrations();
    const fifth = files[4]!;
    const renamed = fifth.replace(/^(\d{5})_/, '$1_renamed_');
    await cp(path.join(copy, fifth), path.join(copy, renamed));
    await rm(path.join(copy, fifth));

    const error = await refusal(copy);
    expect(error.mismatches).toEqual([
      expect.objectContaining({ problem: 'replaced', id: 5, appliedFile: fifth, file: renamed }),
    ]);
    expect(error.detail).toContain(fifth);
    expect(error.detail).toContain(renamed);
  });

  it('migrations this version does not have (a newer version migrated the database): refused, nothing applied', async () => {
    const { dir: copy, files } = await copyOfMigrations();
    const last = files.at(-1)!;
    await rm(path.join(copy, last));
    // A newer version's next file too: postgres-migrations would apply nothing and report success.
    const newer = files.length + 1;
    await query(
      `insert into migrations (id, name, hash) values (${newer}, 'from_a_newer_version', '${'ab'.repeat(20)}')`,
    );
    try {
      const error = await refusal(copy);
      expect(error.mismatches.map((m) => [m.problem, m.id, m.appliedFile])).toEqual([
        ['unknown', files.length, last],
        ['unknown', newer, `${String(newer).padStart(5, '0')}_from_a_newer_version.sql`],
      ]);
      expect(error.hint).toMatch(/newer pg-settle/);
    } finally {
      await query(`delete from migrations where id = ${newer}`);
    }
  });

  it('nothing is applied on a refusal: a pending file stays pending', async () => {
    const { dir: copy, files } = await copyOfMigrations();
    await writeFile(path.join(copy, files[0]!), `${await readFile(path.join(copy, files[0]!), 'utf8')}-- edited\n`);
    const next = `${String(files.length + 1).padStart(5, '0')}_pending.sql`;
    await writeFile(path.join(copy, next), 'create table public.history_probe (id int);\n');
    await refusal(copy);
    const [row] = await query<{ present: boolean }>(
      `select to_regclass('public.history_probe') is not null as present`,
    );
    expect(row?.present).toBe(false);
  });
});

describe('pg-settle migrate on a history that does not match', { timeout: 120_000 }, () => {
  it('exit 4 with MigrationHistoryError, the file and both hashes; --json carries code, detail and hint', async () => {
    const [before] = await query<{ hash: string; name: string }>('select hash, name from migrations where id = 3');
    const stale = 'cd'.repeat(20);
    // What a database migrated by an earlier build holds: another hash for an applied file.
    await query(`update migrations set hash = '${stale}' where id = 3`);
    try {
      const text = await runCli(['migrate'], { databaseUrl: db.url });
      expect(text.code).toBe(4);
      expect(text.stderr).toContain(`pg-settle: the database's migration history does not match`);
      expect(text.stderr).toContain(`00003_${before!.name}.sql`);
      expect(text.stderr).toContain(stale);
      expect(text.stderr).toContain(before!.hash);
      expect(text.stderr).toMatch(/hint: {5}From 0\.1\.0 on, released migrations are append-only/);

      const json = await runCli(['migrate', '--json'], { databaseUrl: db.url });
      expect(json.code).toBe(4);
      expect(json.json).toMatchObject({
        ok: false,
        exitCode: 4,
        error: {
          name: 'MigrationHistoryError',
          code: 'MIGRATION_HISTORY_MISMATCH',
          sqlstate: null,
          detail: expect.stringContaining(stale),
          hint: expect.stringContaining('append-only'),
        },
      });
    } finally {
      await query(`update migrations set hash = '${before!.hash}' where id = 3`);
    }
    const again = await runCli(['migrate', '--json'], { databaseUrl: db.url });
    expect(again.code).toBe(0);
  });
});
