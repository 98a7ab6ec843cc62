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
 * Applies pending migrations with postgres-migrations (forward-only; refuses an edited,
 * already-applied file with "Hashes don't match"). Idempotent, and safe when several processes
 * migrate the same database at once: postgres-migrations serializes runs with a session-level
 * advisory lock, and a run that waited finds the work done.
 *
 * A given client must be connected and is left open; a connection string gets its own client.
 */
export async function migrate(
  connection: string | pg.Client | pg.PoolClient,
  opts: MigrateOptions = {},
): Promise<MigrateResult> {
  const dir = opts.dir ?? defaultMigrationsDir();
  const logger = opts.log ?? (() => {});

  if (typeof connection !== 'string') {
    const applied = await postgresMigrations.migrate({ client: connection }, dir, { logger });
    return { applied: applied.map((migration) => migration.fileName) };
  }

  const client = new pg.Client({ connectionString: connection });
  client.on('error', (error) => logger(`migration client error: ${error.message}`));
  await client.connect();
  try {
    const applied = await postgresMigrations.migrate({ client }, dir, { logger });
    return { applied: applied.map((migration) => migration.fileName) };
  } finally {
    await client.end();
  }
}
