// docs/migrations-in-your-tool.md's recipes, run as written with the real tools (pinned in
// package.json: drizzle-kit with drizzle-orm, knex) against throwaway databases: the shell block
// and files of a tool's section, an upgrade (the last file added by a second run of the same
// block), and the schema compared, pg_dump line by line, with the one `pg-settle migrate` builds.
// Prisma's section is not run: `prisma migrate deploy` downloads its schema engine at first use,
// which this machine cannot (no network but the package registries).
import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { quoteIdent, withDatabase } from '../../src/db/database-url.js';
import { exportMigrations } from '../../src/db/export-migrations.js';
import { migrate } from '../../src/db/migrate.js';
import { defaultMigrationsDir } from '../../src/db/migrations-dir.js';
import { dumpSettleSchema, findPgDump } from '../../src/db/schema-dump.js';
import { fencedBlocks } from '../docs/markdown.js';
import { ROOT } from '../support/cli.js';
import '../../src/testing/index.js';

const run = promisify(execFile);
const doc = await readFile(path.join(ROOT, 'docs/migrations-in-your-tool.md'), 'utf8');
const MIGRATIONS = process.env.PG_SETTLE_MIGRATIONS_DIR ?? defaultMigrationsDir();
const pgDump = findPgDump();
const dumpMajor =
  pgDump === undefined
    ? 0
    : Number(/(\d+)\./.exec(execFileSync(pgDump, ['--version'], { encoding: 'utf8' }))?.[1] ?? 0);
const serverMajor = Math.floor(inject('serverVersionNum') / 10000);
const suffix = randomBytes(4).toString('hex');
const databases: string[] = [];
const dirs: string[] = [];
let reference: string;

/** The fenced blocks of the doc's section `## <title>`, in order. */
function sectionBlocks(title: string): { lang: string; body: string }[] {
  const start = doc.indexOf(`\n## ${title}\n`);
  if (start < 0) throw new Error(`docs/migrations-in-your-tool.md has no section "${title}"`);
  const end = doc.indexOf('\n## ', start + 1);
  return fencedBlocks(doc.slice(start, end < 0 ? undefined : end));
}

async function asAdmin<T>(fn: (c: pg.Client) => Promise<T>, database?: string): Promise<T> {
  const url = database === undefined ? inject('adminUrl') : withDatabase(inject('adminUrl'), database);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function freshDatabase(label: string): Promise<string> {
  const name = `settle_${label}_${suffix}`;
  await asAdmin((c) => c.query(`create database ${quoteIdent(name)} template template0 encoding 'UTF8'`));
  databases.push(name);
  return name;
}

/**
 * A project directory for a recipe: the repository's node_modules (the tools, pinned), `npx`
 * that runs the installed binary (never a download), and `pg-settle` that runs this checkout's
 * CLI. With `withoutLast`, `pg-settle migrate --print` prints the migrations of a version that
 * lacked the last file: the next run of the block is the upgrade to this version.
 */
async function project(): Promise<{
  dir: string;
  runBlock(script: string, opts: { withoutLast: boolean; databaseUrl: string }): Promise<string>;
}> {
  const dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-tool-'));
  dirs.push(dir);
  await symlink(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
  const bin = path.join(dir, '.bin');
  await mkdir(bin);
  await writeFile(path.join(bin, 'npx'), '#!/bin/sh\nexec "$@"\n');
  const last = (await readdir(MIGRATIONS))
    .filter((f) => f.endsWith('.sql'))
    .sort()
    .at(-1)!;
  await writeFile(
    path.join(bin, 'pg-settle'),
    `#!/bin/sh\n"${process.execPath}" "${path.join(ROOT, 'bin/pg-settle.js')}" "$@" || exit $?\n` +
      `if [ "$1" = migrate ] && [ "$2" = --print ] && [ "$WITHOUT_LAST" = 1 ]; then rm -f "$3/${last}"; fi\n`,
  );
  for (const f of ['npx', 'pg-settle']) await chmod(path.join(bin, f), 0o755);
  return {
    dir,
    async runBlock(script, opts) {
      const env = {
        ...process.env,
        PATH: `${bin}:${path.join(ROOT, 'node_modules/.bin')}:${process.env.PATH ?? ''}`,
        DATABASE_URL: opts.databaseUrl,
        WITHOUT_LAST: opts.withoutLast ? '1' : '0',
      };
      const { stdout, stderr } = await run('bash', ['-euo', 'pipefail', '-c', script], {
        cwd: dir,
        env,
        timeout: 240_000,
        maxBuffer: 16 * 1024 * 1024,
      }).catch((error: { stdout?: string; stderr?: string; message: string }) => {
        throw new Error(`${error.message}\n${error.stdout ?? ''}\n${error.stderr ?? ''}`);
      });
      return `${stdout}${stderr}`;
    },
  };
}

async function expectSameSchema(database: string, ctx: { skip(condition: boolean, note: string): void }) {
  ctx.skip(pgDump === undefined, 'pg_dump is not installed (postgresql-client-15); set PG_DUMP to its path');
  ctx.skip(
    dumpMajor < serverMajor,
    `pg_dump ${dumpMajor} cannot dump a PostgreSQL ${serverMajor} server; set PG_DUMP to a pg_dump ${serverMajor}`,
  );
  const dumped = await dumpSettleSchema(withDatabase(inject('adminUrl'), database), pgDump);
  expect(dumped.split('\n').length).toBeGreaterThan(500);
  expect(dumped.split('\n')).toEqual(reference.split('\n'));
}

beforeAll(async () => {
  const migrated = await freshDatabase('migrated');
  await migrate(withDatabase(inject('adminUrl'), migrated), { dir: MIGRATIONS });
  if (pgDump !== undefined && dumpMajor >= serverMajor)
    reference = await dumpSettleSchema(withDatabase(inject('adminUrl'), migrated), pgDump);
});

afterAll(async () => {
  await asAdmin(async (c) => {
    for (const name of databases) await c.query(`drop database if exists ${quoteIdent(name)} with (force)`);
  });
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe('Knex (docs/migrations-in-your-tool.md, "Knex")', { timeout: 480_000 }, () => {
  const [migrationFile, script] = sectionBlocks('Knex');

  it('the section has the migration file and the shell block', () => {
    expect(migrationFile?.lang).toBe('js');
    expect(script?.lang).toBe('sh');
    expect(script?.body).toContain('knex migrate:latest');
  });

  it('applies every file, then an upgrade the new one only: the schema pg-settle migrate builds', async (ctx) => {
    const database = await freshDatabase('knex');
    const url = withDatabase(inject('adminUrl'), database);
    const { dir, runBlock } = await project();
    await mkdir(path.join(dir, 'migrations'));
    await writeFile(path.join(dir, 'settle-migration.cjs'), migrationFile!.body);
    await writeFile(
      path.join(dir, 'knexfile.js'),
      "module.exports = { client: 'pg', connection: process.env.DATABASE_URL };\n",
    );
    const files = (await readdir(MIGRATIONS)).filter((f) => f.endsWith('.sql')).sort();

    await runBlock(script!.body, { withoutLast: true, databaseUrl: url });
    const batches = async () =>
      asAdmin(
        async (c) =>
          (await c.query<{ name: string; batch: number }>('select name, batch from knex_migrations order by id')).rows,
        database,
      );
    const first = await batches();
    expect(first).toHaveLength(files.length - 1);
    expect(new Set(first.map((r) => r.batch))).toEqual(new Set([1]));

    // The upgrade: the same block again, this version printing one file more.
    await runBlock(script!.body, { withoutLast: false, databaseUrl: url });
    const second = await batches();
    expect(second).toHaveLength(files.length);
    expect(second.at(-1)).toMatchObject({
      name: expect.stringContaining(`_settle_${files.at(-1)!.replace(/\.sql$/, '')}`),
      batch: 2,
    });
    expect(await readdir(path.join(dir, 'migrations'))).toHaveLength(files.length);

    await expectSameSchema(database, ctx);
  });

  it('without the escape, Knex rewrites a `?` into a placeholder: a changed function, or a failed batch', async () => {
    // A file with what the engine's files hold: a `?` in a regular expression (installed
    // changed, reported as success) and the jsonb `?` operator (the batch fails).
    const database = await freshDatabase('knex_bare');
    const url = withDatabase(inject('adminUrl'), database);
    const { dir } = await project();
    const write = async (name: string, sql: string, escape: boolean) => {
      await writeFile(path.join(dir, 'settle-migrations', `${name}.sql`), sql);
      const body = escape ? migrationFile!.body : migrationFile!.body.replace(".replaceAll('?', '\\\\?')", '');
      expect(body !== migrationFile!.body || escape).toBe(true);
      await writeFile(path.join(dir, 'migrations', `20260101000000_settle_${name}.cjs`), body);
    };
    await mkdir(path.join(dir, 'settle-migrations'));
    await mkdir(path.join(dir, 'migrations'));
    await writeFile(
      path.join(dir, 'knexfile.js'),
      "module.exports = { client: 'pg', connection: process.env.DATABASE_URL };\n",
    );
    const knex = () =>
      run(process.execPath, [path.join(ROOT, 'node_modules/knex/bin/cli.js'), 'migrate:latest'], {
        cwd: dir,
        env: { ...process.env, DATABASE_URL: url },
      }).then(
        () => 0,
        (error: { code?: number }) => error.code ?? -1,
      );
    const source = async (fn: string) =>
      asAdmin(
        async (c) =>
          (await c.query<{ src: string | null }>(`select (select prosrc from pg_proc where proname = $1) as src`, [fn]))
            .rows[0]?.src,
        database,
      );

    const regexp = `create function public.printable(value text) returns boolean language sql as $$ select value ~ '^[!-~]([ -~]*[!-~])?$' $$;\n`;
    await write('00001_regexp', regexp, false);
    expect(await knex()).toBe(0);
    expect(await source('printable')).toContain("'^[!-~]([ -~]*[!-~])$1$'");

    const operator = `create function public.truncated(detail jsonb) returns boolean language sql as $$ select detail ? 'payload_truncated' $$;\n`;
    await write('00002_operator', operator, false);
    expect(await knex()).not.toBe(0);
    expect(await source('truncated')).toBeNull();

    // The documented file, escape and all: both reach PostgreSQL as written.
    await rm(path.join(dir, 'migrations', '20260101000000_settle_00002_operator.cjs'));
    await write('00002_operator', operator, true);
    await write('00003_regexp_again', regexp.replace('printable', 'printable_again'), true);
    expect(await knex()).toBe(0);
    expect(await source('truncated')).toContain("detail ? 'payload_truncated'");
    expect(await source('printable_again')).toContain("'^[!-~]([ -~]*[!-~])?$'");
  });

  it("no migration file has a backslash right before a `?` (Knex's escape would drop it)", async () => {
    for (const m of await exportMigrations(MIGRATIONS)) expect(m.sql, m.fileName).not.toMatch(/\\\?/);
  });
});

describe('Drizzle (docs/migrations-in-your-tool.md, "Drizzle")', { timeout: 480_000 }, () => {
  const [script, config] = sectionBlocks('Drizzle');

  it('the section has the shell block and drizzle.config.ts', () => {
    expect(script?.lang).toBe('sh');
    expect(script?.body).toContain('drizzle-kit migrate');
    expect(config?.lang).toBe('ts');
    expect(config?.body).toContain('defineConfig');
  });

  it('applies every file, then an upgrade the new one only: the schema pg-settle migrate builds', async (ctx) => {
    const database = await freshDatabase('drizzle');
    const url = withDatabase(inject('adminUrl'), database);
    const { dir, runBlock } = await project();
    await writeFile(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    await writeFile(path.join(dir, 'drizzle.config.ts'), config!.body);
    await mkdir(path.join(dir, 'src'));
    await writeFile(path.join(dir, 'src/schema.ts'), 'export {};\n');
    const files = (await readdir(MIGRATIONS)).filter((f) => f.endsWith('.sql')).sort();

    await runBlock(script!.body, { withoutLast: true, databaseUrl: url });
    const applied = async () =>
      asAdmin(
        async (c) =>
          (await c.query<{ n: number }>('select count(*)::int as n from drizzle.__drizzle_migrations')).rows[0]?.n,
        database,
      );
    expect(await applied()).toBe(files.length - 1);

    await runBlock(script!.body, { withoutLast: false, databaseUrl: url });
    expect(await applied()).toBe(files.length);
    expect((await readdir(path.join(dir, 'drizzle'))).filter((f) => f.endsWith('.sql'))).toHaveLength(files.length);

    await expectSameSchema(database, ctx);
  });
});
