import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach } from 'vitest';
import type { EngineDatabase } from './database.js';

/**
 * A real login role (not `set role` from a superuser), so that session_user is the caller, as it
 * is for a service in production. Roles are cluster-wide: each gets a random name and is dropped
 * after the file. `grants` are engine roles granted to it (e.g. settle_app).
 */
export interface LoginRole {
  readonly name: string;
  /** A new connection authenticated as this role, closed after the test. */
  connect(): Promise<pg.Client>;
}

export function useLoginRoles(db: EngineDatabase): (prefix: string, grants: readonly string[]) => Promise<LoginRole> {
  const created: string[] = [];
  const open: pg.Client[] = [];
  // Connections end with their test: a test that fails inside a transaction must not hold it (and
  // with it the cluster-wide feed horizon, test/engine/support/feed.ts) for the rest of the run.
  afterEach(async () => {
    await Promise.all(open.splice(0).map((client) => client.end().catch(() => {})));
  });
  afterAll(async () => {
    if (created.length === 0) return;
    const admin = await db.connect();
    for (const name of created) await admin.query(`drop role if exists "${name}"`).catch(() => {});
    await admin.end().catch(() => {});
  });
  return async (prefix, grants) => {
    const name = `${prefix}_${randomBytes(4).toString('hex')}`;
    const admin = await db.connect();
    await admin.query(`create role "${name}" login`);
    created.push(name);
    for (const grant of grants) await admin.query(`grant ${grant} to "${name}"`);
    const url = new URL(db.url);
    url.username = name;
    url.password = '';
    return {
      name,
      async connect() {
        const client = new pg.Client({ connectionString: url.toString() });
        client.on('error', () => {});
        open.push(client);
        await client.connect();
        return client;
      },
    };
  };
}
