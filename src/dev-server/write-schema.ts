// npm run schema [-- --check]
// Migrates a fresh database on a throwaway server (see provisionPostgres), dumps the settle
// schemas and writes sql/schema.sql; with --check, exits 1 instead of writing when it differs.
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { quoteIdent, withDatabase } from '../db/database-url.js';
import { migrate } from '../db/migrate.js';
import { defaultMigrationsDir } from '../db/migrations-dir.js';
import { provisionPostgres } from './provision.js';
import { dumpSettleSchema } from '../db/schema-dump.js';
import { withPgClient } from '../db/with-pg-client.js';

const check = process.argv.includes('--check');
const schemaFile = path.join(path.dirname(defaultMigrationsDir()), 'schema.sql');
const dbName = `settle_schema_dump_${process.pid}`;

const server = await provisionPostgres();
try {
  await withPgClient(server.adminUrl, (c) =>
    c.query(`create database ${quoteIdent(dbName)} template template0 encoding 'UTF8'`),
  );
  const url = withDatabase(server.adminUrl, dbName);
  await migrate(url);
  const dump = await dumpSettleSchema(url);
  await withPgClient(server.adminUrl, (c) => c.query(`drop database ${quoteIdent(dbName)} with (force)`));
  const current = await readFile(schemaFile, 'utf8').catch(() => '');
  if (check) {
    if (current !== dump) {
      console.error(`${schemaFile} is out of date: run npm run schema`);
      process.exitCode = 1;
    } else {
      console.log(`${schemaFile} is up to date`);
    }
  } else {
    await writeFile(schemaFile, dump);
    console.log(`${current === dump ? 'unchanged' : 'wrote'} ${schemaFile} (${dump.split('\n').length} lines)`);
  }
} finally {
  await server.stop();
}
