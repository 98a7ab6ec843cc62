import pg from 'pg';
import { useTestDatabase } from '../../support/database.js';

export interface ReliabilityDatabase {
  /** Superuser connection string of this file's database. */
  readonly url: string;
  /** A new superuser connection; closed in afterAll unless the test ends it. */
  connect(options?: { applicationName?: string }): Promise<pg.Client>;
}

/** One cloned, migrated database for the calling test file; connections closed in afterAll. */
export function useReliabilityDatabase(hint: string): ReliabilityDatabase {
  const open: pg.Client[] = [];
  const db = useTestDatabase(hint, {
    beforeDrop: async () => {
      await Promise.all(open.splice(0).map((c) => c.end().catch(() => {})));
    },
  });
  return {
    get url() {
      return db.url;
    },
    async connect(options = {}) {
      const client = new pg.Client({ connectionString: db.url, application_name: options.applicationName ?? 'reliability-admin' });
      client.on('error', () => {});
      open.push(client);
      await client.connect();
      return client;
    },
  };
}
