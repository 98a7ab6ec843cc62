import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
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
      const client = new pg.Client({
        connectionString: db.url,
        application_name: options.applicationName ?? 'reliability-admin',
      });
      client.on('error', () => {});
      open.push(client);
      await client.connect();
      return client;
    },
  };
}

export interface FaultSessions {
  /** Superuser session for inspecting state and waiting on backends. */
  readonly admin: pg.Client;
  /** Superuser session that holds the locks racers are parked behind. */
  readonly locker: pg.Client;
}

/**
 * The setup the fault suites share: an admin and a locker session opened before the file's tests,
 * `record(failed)` after each test (the scenario tally), and `closeAfter` ended in afterAll.
 */
export function useFaultSessions(
  db: ReliabilityDatabase,
  closeAfter: readonly { end(): Promise<void> }[],
  record: (failed: boolean) => void,
): FaultSessions {
  const sessions = {} as { admin: pg.Client; locker: pg.Client };
  beforeAll(async () => {
    sessions.admin = await db.connect();
    sessions.locker = await db.connect({ applicationName: 'reliability-locker' });
  });
  afterEach(({ task }) => {
    record(task.result?.state === 'fail');
  });
  afterAll(async () => {
    await Promise.all(closeAfter.map((c) => c.end().catch(() => {})));
  });
  return sessions;
}
