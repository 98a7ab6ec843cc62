import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterEach } from 'vitest';
import { useTestDatabase } from '../../support/database.js';

export interface EngineDatabase {
  /** Superuser connection string of this file's database. */
  readonly url: string;
  /** A new superuser connection, closed after the current test. */
  connect(): Promise<pg.Client>;
  /** A new connection acting as settle_app (`set role settle_app`), closed after the current test. */
  app(): Promise<pg.Client>;
}

/**
 * One cloned, migrated database for the calling test file (created in beforeAll, dropped in
 * afterAll). Connections opened through it are closed after each test.
 */
export function useEngineDatabase(hint: string): EngineDatabase {
  const db = useTestDatabase(hint);
  const open: pg.Client[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((client) => client.end().catch(() => {})));
  });
  const connect = async (): Promise<pg.Client> => {
    const client = new pg.Client({ connectionString: db.url });
    client.on('error', () => {});
    open.push(client);
    await client.connect();
    return client;
  };
  return {
    get url() {
      return db.url;
    },
    connect,
    app: async () => asApp(await connect()),
  };
}

/** Switches a superuser session to the application role for the rest of the session. */
export async function asApp<C extends pg.ClientBase>(client: C): Promise<C> {
  await client.query('set role settle_app');
  return client;
}

/** Switches a superuser session to the maintenance role for the rest of the session. */
export async function asAdmin(client: pg.ClientBase): Promise<void> {
  await client.query('set role settle_admin');
}

/** A key no other test uses: `<prefix>-<random>`. */
export function uniqueKey(prefix: string): string {
  return `${prefix}-${randomBytes(6).toString('hex')}`;
}
