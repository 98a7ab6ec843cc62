import { redactPassword } from '../db/database-url.js';
import { MigrationHistoryError, migrate } from '../db/migrate.js';
import { NoPostgresServerError, provisionPostgres, type ProvisionedPostgres } from '../dev-server/provision.js';
import { DatabaseUnavailableError, MissingDatabaseError } from './errors.js';

/** The database a command runs against. */
export interface CommandDatabase {
  readonly url: string;
  /** True when the CLI started a throwaway server for this command (simulate only). */
  readonly throwaway: boolean;
  close(): Promise<void>;
}

/** `--database-url`, else a non-empty `DATABASE_URL`, else undefined. */
export function givenDatabaseUrl(flagUrl: string | undefined): string | undefined {
  return flagUrl ?? (process.env.DATABASE_URL === '' ? undefined : process.env.DATABASE_URL);
}

/**
 * The database given by `--database-url` or `DATABASE_URL`. Without one, an operator command
 * refuses (MissingDatabaseError, exit 2): answering from a database of its own would tell an
 * on-call engineer who forgot to export the URL that all is well. Only `simulate` passes
 * `provision: true`, and then gets a throwaway PostgreSQL (announced on stderr, migrated,
 * deleted when the command ends). `migrateAlways` also migrates a given database (idempotent).
 */
export async function openDatabase(
  flagUrl: string | undefined,
  opts: { readonly migrateAlways?: boolean; readonly provision?: boolean; readonly ignoreEnvironment?: boolean } = {},
): Promise<CommandDatabase> {
  const given = opts.ignoreEnvironment === true ? flagUrl : givenDatabaseUrl(flagUrl);
  if (given !== undefined) {
    try {
      const parsed = new URL(given);
      if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') throw new Error('not postgres://');
    } catch {
      throw new DatabaseUnavailableError(`not a postgres:// connection string: ${redactPassword(given)}`);
    }
    if (opts.migrateAlways === true) await migrateOrExplain(given);
    return { url: given, throwaway: false, close: async () => {} };
  }
  if (opts.provision !== true) throw new MissingDatabaseError();

  process.stderr.write('pg-settle: starting a throwaway PostgreSQL of its own (deleted on exit)\n');
  let server: ProvisionedPostgres;
  try {
    server = await provisionPostgres();
  } catch (error) {
    if (error instanceof NoPostgresServerError)
      throw new DatabaseUnavailableError(`${error.message} (--database-url URL --write-to-database)`, { cause: error });
    throw new DatabaseUnavailableError(`could not start a throwaway PostgreSQL: ${(error as Error).message}`, {
      cause: error,
    });
  }
  try {
    await migrateOrExplain(server.adminUrl);
  } catch (error) {
    await server.stop();
    throw error;
  }
  process.stderr.write(`pg-settle: throwaway PostgreSQL (${server.kind}) ready and migrated\n`);
  return { url: server.adminUrl, throwaway: true, close: () => server.stop() };
}

async function migrateOrExplain(url: string): Promise<string[]> {
  try {
    return (await migrate(url)).applied;
  } catch (error) {
    if (error instanceof MigrationHistoryError) throw error;
    throw new DatabaseUnavailableError(`migration of ${redactPassword(url)} failed: ${(error as Error).message}`, {
      cause: error,
    });
  }
}
