import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import { quoteIdent, withDatabase } from '../db/database-url.js';
import { withPgClient } from '../db/with-pg-client.js';
import './provided-context.js';

/** A database cloned from the migrated template for one test file: its URL and drop(). */
export interface TestDatabase {
  /** Superuser connection string to the new database. */
  readonly url: string;
  /** Superuser connection string to the database `postgres` of the same server. */
  readonly adminUrl: string;
  /** The database's name. */
  readonly name: string;
  /** Drops the database, terminating its connections (idempotent). */
  drop(): Promise<void>;
}

/** Options of createTestDatabase(). */
export interface CreateTestDatabaseOptions {
  /** Database to clone; defaults to the migrated template. `template0` gives an empty database. */
  readonly template?: string;
}

/**
 * Advisory-lock key (in the `postgres` database) serializing clones across all test workers:
 * a clone fails with 55006 while another session is attached to the template.
 */
const CLONE_LOCK_KEY = 0x5e771e;
const CLONE_RETRY_MS = 30_000;

/**
 * A fresh database cloned from the migrated template (one per test file, in beforeAll).
 * Only usable inside vitest workers started with src/testing/global-setup.ts.
 */
export async function createTestDatabase(name?: string, opts: CreateTestDatabaseOptions = {}): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl');
  const template = opts.template ?? inject('templateDb');
  if (adminUrl === undefined || template === undefined) {
    throw new Error(
      'createTestDatabase: no adminUrl/templateDb provided; is src/testing/global-setup.ts the vitest globalSetup?',
    );
  }
  const dbName = uniqueDatabaseName(name);

  await withPgClient(adminUrl, async (admin) => {
    await admin.query('select pg_advisory_lock($1)', [CLONE_LOCK_KEY]);
    try {
      await retryWhileTemplateBusy(() =>
        admin.query(`create database ${quoteIdent(dbName)} template ${quoteIdent(template)}`),
      );
    } finally {
      await admin.query('select pg_advisory_unlock($1)', [CLONE_LOCK_KEY]);
    }
  });

  let dropped: Promise<void> | undefined;
  return {
    url: withDatabase(adminUrl, dbName),
    adminUrl,
    name: dbName,
    drop: () =>
      (dropped ??= withPgClient(adminUrl, async (admin) => {
        await admin.query(`drop database if exists ${quoteIdent(dbName)} with (force)`);
      })),
  };
}

/** `settle_test_<worker>_<hint>_<random>`, at most 63 bytes, lowercase (no quoting surprises). */
function uniqueDatabaseName(hint: string | undefined): string {
  const worker = (process.env.VITEST_POOL_ID ?? process.env.VITEST_WORKER_ID ?? '0').replace(/\D/g, '') || '0';
  const cleanHint = (hint ?? '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .slice(0, 30);
  const suffix = randomBytes(4).toString('hex');
  return ['settle_test', worker, cleanHint, suffix].filter((part) => part !== '').join('_');
}

async function retryWhileTemplateBusy(fn: () => Promise<unknown>): Promise<void> {
  const deadline = Date.now() + CLONE_RETRY_MS;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      await fn();
      return;
    } catch (error) {
      const busy = (error as { code?: unknown }).code === '55006';
      if (!busy || Date.now() + delay > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}
