import pg from 'pg';
// postgres-migrations is CommonJS: a default import is its module.exports under NodeNext, tsx
// and vitest alike (named imports depend on cjs-module-lexer spotting the re-exports).
import postgresMigrations from 'postgres-migrations';
import { defaultMigrationsDir } from './migrations-dir.js';

export interface MigrateOptions {
  readonly log?: (msg: string) => void;
  /** Directory of `NNNNN_name.sql` files; defaults to the package's `sql/migrations`. */
  readonly dir?: string;
}

export interface MigrateResult {
  /**
   * File names applied by this call, in order (empty when the database was up to date).
   * On a fresh database the first is postgres-migrations' own `0_create-migrations-table.sql`.
   */
  readonly applied: string[];
}

/**
 * A migration failed. postgres-migrations rethrows a plain Error that keeps only the message;
 * this one also carries the failing statement's database error as `cause` and its `code`
 * (SQLSTATE), `detail` and `hint`, so that mapDatabaseError turns e.g. SE030 (not a UTF8
 * database) into its class. `code` is undefined when no statement failed (an edited migration:
 * "Hashes don't match", a bad file name).
 */
export class MigrationError extends Error {
  readonly code: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(message: string, databaseError: DatabaseErrorFields | undefined, cause: unknown) {
    super(message, { cause: databaseError ?? cause });
    this.name = 'MigrationError';
    this.code = databaseError?.code;
    this.detail = databaseError?.detail;
    this.hint = databaseError?.hint;
  }
}

interface DatabaseErrorFields {
  readonly code: string;
  readonly detail?: string | undefined;
  readonly hint?: string | undefined;
}

const isDatabaseError = (error: unknown): error is Error & DatabaseErrorFields => {
  const code: unknown = error instanceof Error ? (error as { code?: unknown }).code : undefined;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code);
};

type MigrationClient = pg.Client | pg.PoolClient;

/**
 * Runs postgres-migrations over `client`, remembering the first database error any of its
 * statements raised, and rethrows its failure as a MigrationError carrying that error.
 */
async function runMigrations(client: MigrationClient, dir: string, logger: (msg: string) => void): Promise<MigrateResult> {
  let failure: (Error & DatabaseErrorFields) | undefined;
  const query = (...args: unknown[]): unknown => {
    const result = (client.query as (...a: unknown[]) => unknown)(...args);
    if (result instanceof Promise) {
      return result.catch((error: unknown) => {
        if (failure === undefined && isDatabaseError(error)) failure = error;
        throw error;
      });
    }
    return result;
  };
  // postgres-migrations only ever calls query() on the client it is given.
  const watched = new Proxy(client, {
    get: (target, property) => (property === 'query' ? query : Reflect.get(target, property, target)),
  });
  try {
    const applied = await postgresMigrations.migrate({ client: watched }, dir, { logger });
    return { applied: applied.map((migration) => migration.fileName) };
  } catch (error) {
    throw new MigrationError(error instanceof Error ? error.message : String(error), failure, error);
  }
}

/**
 * Applies pending migrations with postgres-migrations (forward-only; refuses an edited,
 * already-applied file with "Hashes don't match"). Idempotent, and safe when several processes
 * migrate the same database at once: postgres-migrations serializes runs with a session-level
 * advisory lock, and a run that waited finds the work done.
 *
 * A given client must be connected and is left open; a connection string gets its own client.
 * Throws MigrationError (with the failing statement's SQLSTATE as `code`) when a migration fails.
 */
export async function migrate(
  connection: string | pg.Client | pg.PoolClient,
  opts: MigrateOptions = {},
): Promise<MigrateResult> {
  const dir = opts.dir ?? defaultMigrationsDir();
  const logger = opts.log ?? (() => {});

  if (typeof connection !== 'string') return runMigrations(connection, dir, logger);

  const client = new pg.Client({ connectionString: connection });
  client.on('error', (error) => logger(`migration client error: ${error.message}`));
  await client.connect();
  try {
    return await runMigrations(client, dir, logger);
  } finally {
    await client.end();
  }
}
