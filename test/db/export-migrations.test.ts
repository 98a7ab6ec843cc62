// `pg-settle migrate --print DIR` writes the migrations for the user's own tool. Applied the way
// such a tool applies them (each file in order, in its own transaction, with plain `pg`) by the
// recommended deploy login (a non-superuser CREATEROLE login that owns the database), they give
// the schema `pg-settle migrate` gives (pg_dump of the settle schemas, compared line by line),
// leave the login unable to act as settle_owner, and the engine works there as settle_app.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { migrate } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { dumpSettleSchema, findPgDump } from '../../src/db/schema-dump.js';
import { createSettleClient } from '../../src/index.js';
import { runCli } from '../support/cli.js';
import '../../src/testing/index.js';

const suffix = randomBytes(4).toString('hex');
const deploy = `deploy_export_${suffix}`;
const exported = `settle_exported_${suffix}`;
const migrated = `settle_migrated_${suffix}`;
const pg16 = inject('serverVersionNum') >= 160000;
const pgDump = findPgDump();
/** pg_dump refuses a server of a newer major version than its own. */
const dumpMajor =
  pgDump === undefined
    ? 0
    : Number(/(\d+)\./.exec(execFileSync(pgDump, ['--version'], { encoding: 'utf8' }))?.[1] ?? 0);
const serverMajor = Math.floor(inject('serverVersionNum') / 10000);
let dir: string;

const urlOf = (database: string, user?: string): string => {
  const u = new URL(withDatabase(inject('adminUrl'), database));
  if (user !== undefined) {
    u.username = user;
    u.password = '';
  }
  return u.toString();
};

async function withClient<T>(url: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  await withClient(inject('adminUrl'), async (c) => {
    await c.query(`create role ${quoteIdent(deploy)} login createrole`);
    // The roles exist already (the cluster's template was migrated): on 16+ the deploy login
    // needs ADMIN OPTION on settle_owner, as docs/operations.md says for pg-settle migrate.
    if (pg16) await c.query(`grant settle_owner to ${quoteIdent(deploy)} with admin true, inherit false, set false`);
    for (const db of [exported, migrated]) {
      await c.query(`create database ${quoteIdent(db)} owner ${quoteIdent(deploy)} template template0 encoding 'UTF8'`);
    }
  });
  dir = await mkdtemp(path.join(tmpdir(), 'settle-export-'));
});

afterAll(async () => {
  await withClient(inject('adminUrl'), async (c) => {
    for (const db of [exported, migrated]) await c.query(`drop database if exists ${quoteIdent(db)} with (force)`);
    await c.query(`drop role if exists ${quoteIdent(deploy)}`);
  });
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('pg-settle migrate --print', () => {
  it('writes one versioned file per migration, each holding the migration verbatim', { timeout: 120_000 }, async () => {
    const run = await runCli(['migrate', '--print', dir, '--json']);
    expect(run.code, run.stderr).toBe(0);
    const sources = (await readdir(defaultMigrationsDir())).filter((f) => f.endsWith('.sql')).sort();
    expect(run.json).toMatchObject({ ok: true, command: 'migrate', files: sources });
    expect((await readdir(dir)).sort()).toEqual(sources);
    for (const file of sources) {
      expect(await readFile(path.join(dir, file), 'utf8')).toContain(
        await readFile(path.join(defaultMigrationsDir(), file), 'utf8'),
      );
    }
  });

  it('refuses a directory holding migration files this version does not have, writing nothing', {
    timeout: 120_000,
  }, async () => {
    const other = await mkdtemp(path.join(tmpdir(), 'settle-export-stale-'));
    try {
      await writeFile(path.join(other, '00007_claim.sql'), '-- printed by a version numbered differently\n');
      const run = await runCli(['migrate', '--print', other]);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain('00007_claim.sql');
      expect(await readdir(other)).toEqual(['00007_claim.sql']);
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });

  it('applied file by file, each in its own transaction, by the deploy login: the schema pg-settle migrate gives', {
    timeout: 300_000,
  }, async (ctx) => {
    const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
    expect(files.length).toBeGreaterThan(10);
    await withClient(urlOf(exported, deploy), async (c) => {
      for (const file of files) {
        await c.query('begin');
        try {
          await c.query(await readFile(path.join(dir, file), 'utf8'));
          await c.query('commit');
        } catch (error) {
          await c.query('rollback');
          throw new Error(`${file}: ${(error as Error).message}`);
        }
      }
    });
    await migrate(urlOf(migrated, deploy));

    // Neither way leaves the deploy login able to act as settle_owner.
    const canAct = pg16
      ? `pg_has_role($1, 'settle_owner', 'USAGE') or pg_has_role($1, 'settle_owner', 'SET')`
      : `pg_has_role($1, 'settle_owner', 'MEMBER')`;
    const acting = await withClient(
      inject('adminUrl'),
      async (c) => (await c.query<{ acts: boolean }>(`select ${canAct} as acts`, [deploy])).rows[0]!.acts,
    );
    expect(acting).toBe(false);

    ctx.skip(pgDump === undefined, 'pg_dump is not installed (postgresql-client-15); set PG_DUMP to its path');
    ctx.skip(
      dumpMajor < serverMajor,
      `pg_dump ${dumpMajor} cannot dump a PostgreSQL ${serverMajor} server; set PG_DUMP to a pg_dump ${serverMajor}`,
    );
    const [a, b] = await Promise.all([
      dumpSettleSchema(urlOf(exported), pgDump),
      dumpSettleSchema(urlOf(migrated), pgDump),
    ]);
    expect(a.split('\n').length).toBeGreaterThan(500);
    expect(a.split('\n')).toEqual(b.split('\n'));
  });

  it('the engine works in the database the exported files built: one claim and complete as settle_app', {
    timeout: 120_000,
  }, async () => {
    const u = new URL(urlOf(exported));
    u.searchParams.set('options', '-c role=settle_app');
    const settle = createSettleClient({ connectionString: u.toString(), poolSize: 1 });
    try {
      const input = {
        tenant: 'acme',
        key: 'exported-1',
        request: { amount: 5 },
        binding: { principal: 'p', scopes: [], generation: 1 },
      };
      const claimed = await settle.claim({ ...input, leaseMs: 30_000 });
      expect(claimed.outcome).toBe('acquired');
      if (claimed.outcome !== 'acquired') return;
      const done = await settle.complete(claimed.attempt, { paid: true });
      expect(done).toMatchObject({ status: 'completed' });
      expect(await settle.get(input)).toMatchObject({ status: 'completed', result: { paid: true } });
    } finally {
      await settle.end();
    }
  });
});
