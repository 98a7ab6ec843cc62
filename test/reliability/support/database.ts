import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../../src/testing/index.js';

export interface ReliabilityDatabase {
  /** Superuser connection string of this file's database. */
  readonly url: string;
  /** A new superuser connection; closed in afterAll unless the test ends it. */
  connect(options?: { applicationName?: string }): Promise<pg.Client>;
}

/** One cloned, migrated database for the calling test file; connections closed in afterAll. */
export function useReliabilityDatabase(hint: string): ReliabilityDatabase {
  let db: TestDatabase | undefined;
  const open: pg.Client[] = [];
  beforeAll(async () => {
    db = await createTestDatabase(hint);
  });
  afterAll(async () => {
    await Promise.all(open.splice(0).map((c) => c.end().catch(() => {})));
    await db?.drop();
  });
  const url = (): string => {
    if (db === undefined) throw new Error('useReliabilityDatabase: the database is created in beforeAll');
    return db.url;
  };
  return {
    get url() {
      return url();
    },
    async connect(options = {}) {
      const client = new pg.Client({ connectionString: url(), application_name: options.applicationName ?? 'reliability-admin' });
      client.on('error', () => {});
      open.push(client);
      await client.connect();
      return client;
    },
  };
}
