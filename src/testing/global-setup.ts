import { createRequire } from 'node:module';
import type { TestProject } from 'vitest/node';
import { quoteIdent, withDatabase } from '../db/database-url.js';
import { migrate } from '../db/migrate.js';
import { provisionPostgres } from '../dev-server/provision.js';
import { withPgClient } from '../db/with-pg-client.js';
import { TEMPLATE_DB } from './provided-context.js';

/**
 * The suite runs on the Node.js that package.json's `engines` names, or not at all: on Node 20,
 * slonik (the client's driver layer) calls Promise.withResolvers, which Node 20 lacks, and a
 * client test then waits forever on a connection that failed with a TypeError. Failing here says
 * why in one line instead.
 */
function requireSupportedNode(): void {
  const engines = (createRequire(import.meta.url)('../../package.json') as { engines: { node: string } }).engines.node;
  const minimum = Number(/^>=(\d+)$/.exec(engines)?.[1]);
  const major = Number(process.versions.node.split('.')[0]);
  if (!(major >= minimum)) {
    throw new Error(
      `pg-settle's tests need Node.js ${engines} (package.json engines; .nvmrc names the version CI uses), and this is ${process.version}: see the README, "No Node.js 24?"`,
    );
  }
}

/**
 * vitest globalSetup: one PostgreSQL server for the whole run, one migrated template database
 * (`settle_template`) that each test file clones with createTestDatabase().
 *
 * Set PG_SETTLE_TEST_PG_BIN to a server's bin directory to run on that server (e.g. PostgreSQL 18).
 * Set PG_SETTLE_MIGRATIONS_DIR to migrate the template from another directory.
 * Set PG_SETTLE_TEST_LOG=1 to see provisioning and migration logs.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  requireSupportedNode();
  const verbose = process.env.PG_SETTLE_TEST_LOG === '1';
  const log = (msg: string): void => {
    if (verbose) console.log(`[pg-settle test db] ${msg}`);
  };

  const started = Date.now();
  const server = await provisionPostgres({ log });
  let version = 'PostgreSQL (version unknown)';
  try {
    const versionNum = await withPgClient(server.adminUrl, async (c) => {
      const { rows } = await c.query<{ v: string; n: string }>(
        `select current_setting('server_version') as v, current_setting('server_version_num') as n`,
      );
      return { text: `PostgreSQL ${rows[0]?.v ?? '?'}`, num: Number(rows[0]?.n ?? 0) };
    });
    version = versionNum.text;
    project.provide('serverVersionNum', versionNum.num);
    await recreateTemplate(server.adminUrl);
    const dir = process.env.PG_SETTLE_MIGRATIONS_DIR;
    const { applied } = await migrate(
      withDatabase(server.adminUrl, TEMPLATE_DB),
      dir === undefined ? { log } : { log, dir },
    );
    // Tests purge rows they just wrote: the template lowers the minimum retention of
    // settle.purge (24 hours in a real database) to 0. test/engine/retention.test.ts checks the
    // default on a database migrated without this step.
    await withPgClient(withDatabase(server.adminUrl, TEMPLATE_DB), (c) =>
      c.query(`select settle.set_purge_min_retention(interval '0')`).catch((error: unknown) => {
        // A migrations directory from before the setting existed (PG_SETTLE_MIGRATIONS_DIR).
        if ((error as { code?: string }).code !== '42883') throw error;
      }),
    );
    await sealTemplate(server.adminUrl);
    log(`${version} (${server.kind}) and template ready in ${Date.now() - started} ms; applied ${applied.join(', ')}`);
  } catch (error) {
    await server.stop();
    // In a version matrix (PG_SETTLE_TEST_PG_BIN) the failure must say which server failed.
    throw new Error(
      `test setup on ${version} (${server.kind}) failed: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }

  project.provide('adminUrl', server.adminUrl);
  project.provide('templateDb', TEMPLATE_DB);

  return async () => {
    await server.stop();
  };
}

async function recreateTemplate(adminUrl: string): Promise<void> {
  await withPgClient(adminUrl, async (admin) => {
    const existing = await admin.query('select 1 from pg_database where datname = $1', [TEMPLATE_DB]);
    if (existing.rowCount !== 0) {
      // A previous run against the same server (DATABASE_URL) left it: start from scratch.
      await admin.query(`alter database ${quoteIdent(TEMPLATE_DB)} is_template false allow_connections true`);
      await admin.query(`drop database ${quoteIdent(TEMPLATE_DB)} with (force)`);
    }
    await admin.query(`create database ${quoteIdent(TEMPLATE_DB)} template template0`);
  });
}

/**
 * Marks the template and forbids connections to it: CREATE DATABASE ... TEMPLATE fails with
 * 55006 while anyone is connected to the source, so a stray connection would break every clone.
 */
async function sealTemplate(adminUrl: string): Promise<void> {
  await withPgClient(adminUrl, async (admin) => {
    await admin.query(`alter database ${quoteIdent(TEMPLATE_DB)} is_template true allow_connections false`);
  });
}
