import { randomUUID } from 'node:crypto';
import pg from 'pg';
import {
  createSettleClient,
  type CitusRoutingOptions,
  type RunInput,
  type RunOutcome,
  type SettleClient,
  type SettleClientOptions,
} from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';
import { usePerFile } from '../support/per-file.js';

/** `url` whose sessions start as `role` (a startup option; survives slonik's DISCARD ALL). */
export function asRole(url: string, role: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c role=${role}`);
  return parsed.toString();
}

export interface ClientTestContext {
  readonly db: TestDatabase;
  /** Client connected as settle_app (the application role). */
  readonly app: SettleClient;
  /** Client connected as settle_admin (maintenance and views). */
  readonly admin: SettleClient;
  /** A superuser pg client for setup and for provoking guard errors. */
  readonly su: pg.Client;
  client(
    options?: Partial<Omit<SettleClientOptions, 'pool' | 'connectionString'>> & {
      role?: string;
      poolSize?: number;
      preparedStatements?: boolean;
      citusRouting?: CitusRoutingOptions;
    },
  ): SettleClient;
  close(): Promise<void>;
}

export async function setupClientTest(name: string): Promise<ClientTestContext> {
  const db = await createTestDatabase(name);
  const su = new pg.Client({ connectionString: db.url });
  su.on('error', () => {});
  await su.connect();
  const clients: SettleClient[] = [];
  const client: ClientTestContext['client'] = (options = {}) => {
    const { role = 'settle_app', poolSize = 4, ...rest } = options;
    const created = createSettleClient({ ...rest, connectionString: asRole(db.url, role), poolSize });
    clients.push(created);
    return created;
  };
  return {
    db,
    app: client(),
    admin: client({ role: 'settle_admin' }),
    su,
    client,
    async close() {
      await Promise.allSettled(clients.map((c) => c.end()));
      await su.end().catch(() => {});
      await db.drop();
    },
  };
}

/**
 * setupClientTest for the calling test file: set up in beforeAll, closed in afterAll. The
 * fields are readable from beforeAll on.
 */
export function useClientTest(name: string): ClientTestContext {
  return usePerFile(
    `useClientTest(${name})`,
    () => setupClientTest(name),
    (t) => t.close(),
    ['db', 'app', 'admin', 'su', 'client', 'close'],
  );
}

export const binding = { principal: 'alice', scopes: ['payments:write'], generation: 7 } as const;

export const uniqueKey = (label = 'op'): string => `${label}-${randomUUID()}`;

/** Polls `probe` until it returns a truthy value (for "session X is now blocked" barriers). */
export async function waitFor<T>(probe: () => Promise<T | null | undefined | false>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 5; ; delay = Math.min(delay * 2, 100)) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`waitFor: condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}

/** True once some backend of this database waits on a lock. */
export async function someoneWaitsOnLock(su: pg.Client): Promise<boolean> {
  // Inside a transaction pg_stat_activity is a snapshot taken once: clear it to see changes.
  await su.query('select pg_stat_clear_snapshot()');
  const { rows } = await su.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
  );
  return (rows[0]?.n ?? 0) > 0;
}

/** Row counts of the private tables (as superuser): proves a refused input wrote nothing. */
export async function tableCounts(su: pg.Client): Promise<{ operations: number; attempts: number; audit: number }> {
  const { rows } = await su.query<{ operations: number; attempts: number; audit: number }>(
    `select (select count(*)::int from settle_private.operations) as operations,
            (select count(*)::int from settle.attempts) as attempts,
            (select count(*)::int from settle_private.audit_log) as audit`,
  );
  return rows[0] ?? { operations: -1, attempts: -1, audit: -1 };
}

/** A promise with its resolve function, to gate an effect from the test. */
export function gate<T = void>(): { promise: Promise<T>; open: (value: T) => void } {
  let open!: (value: T) => void;
  const promise = new Promise<T>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/**
 * Starts `app.run(input)` with an effect that holds its lease until `release()` and answers
 * `result`; resolves once the effect has begun (the operation is in flight).
 */
export async function holdRun(
  app: SettleClient,
  input: RunInput,
  result: string,
): Promise<{ run: Promise<RunOutcome<string>>; release: () => void }> {
  const started = gate();
  const released = gate();
  const run = app.run(input, async () => {
    started.open();
    await released.promise;
    return result;
  });
  await started.promise;
  return { run, release: () => released.open() };
}
