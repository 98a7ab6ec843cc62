import { createInterface } from 'node:readline';
import { COMMON_HELP, intFlag, stringFlag, type Command } from '../command.js';
import { openDatabase } from '../database.js';
import { EXIT } from '../exit-codes.js';
import { printJson } from '../output.js';
import { UsageError } from '../usage-error.js';

export const CONSOLE_TOKEN_ENV = 'PG_SETTLE_CONSOLE_TOKEN';

/** Each line on stdin (Enter in the terminal) prints a new one-time sign-in address. */
export function offerNewSignIns(running: { newLoginUrl(): string }, print: (open: string) => void): { close(): void } {
  const lines = createInterface({ input: process.stdin, terminal: false });
  lines.on('line', () => print(running.newLoginUrl()));
  return lines;
}

export const consoleCommand: Command = {
  name: 'console',
  summary: 'serve the operator web console (overview, search, an operation, actions) on 127.0.0.1',
  help: `Usage: pg-settle console [--port N] [--host ADDRESS] [--database-url URL] [--json]

Serves a web page for the people on call (docs/operations.md, "The console"): the last hour's
outcomes, what waits for someone (unknown, needs_reconciliation, dead letters), the feed's lag
and what holds its horizon, upkeep and alerts; search by tenant and key or by status, dead-letter
reason and age; an operation's attempts on a time axis with its audit trail and feed events;
and the actions the database login is granted (resolve, redrive, expire leases, reset a feed
consumer), each confirmed first and recorded with that login.

The database login decides what the page may do: settle_readonly reads, settle_reconciler can
resolve, settle_admin can also redrive, expire leases and reset consumers; a login bound to
tenants sees only theirs. Prints the address with a one-time access token on stdout; the first
visit exchanges it for a session cookie (idle 30 min, at most 8 h) and drops it from the address.
Press Enter (a line on stdin) for a new one-time address, valid 15 minutes: the way back in after
signing out, an idle session or from another browser, without a restart. With
${CONSOLE_TOKEN_ENV} set, that token is accepted instead (as often as it is presented) and
the address is printed without it. Runs until Ctrl-C (SIGINT or SIGTERM).

  --port N             port to listen on (0-65535, default 7070; 0: a free port)
  --host ADDRESS       address to bind (default 127.0.0.1: this machine only; anything else
                       exposes the page to the network without TLS)

${COMMON_HELP}`,
  flags: { port: { type: 'string' }, host: { type: 'string' } },
  positionals: [],
  async run(input) {
    const port = intFlag(input, 'port', 7070, 0, 65_535);
    const host = stringFlag(input, 'host') ?? '127.0.0.1';
    if (host.trim() === '') throw new UsageError('--host needs an address');
    const envToken = process.env[CONSOLE_TOKEN_ENV];
    if (envToken !== undefined && envToken !== '' && envToken.length < 16)
      throw new UsageError(`${CONSOLE_TOKEN_ENV} must be at least 16 characters`);
    const db = await openDatabase(stringFlag(input, 'database-url'));
    const { startConsole } = await import('../../console/server.js');
    const fromEnv = envToken !== undefined && envToken !== '';
    const running = await startConsole({
      databaseUrl: db.url,
      host,
      port,
      ...(fromEnv ? { token: envToken, reusableToken: true } : {}),
    });
    const shown = fromEnv ? `${running.url}/?token=<${CONSOLE_TOKEN_ENV}>` : running.loginUrl;
    if (running.exposed)
      process.stderr.write(
        `pg-settle console: warning: bound to ${host}, reachable from other machines over plain HTTP: the sign-in address, the session cookie and every page cross the network unencrypted. Prefer the default 127.0.0.1 and an SSH tunnel (ssh -L ${new URL(running.url).port}:127.0.0.1:${new URL(running.url).port} <this host>).\n` +
          (running.urls.length > 1 ? `pg-settle console: it answers at ${running.urls.join(', ')}\n` : ''),
      );
    if (input.json)
      printJson({
        ok: true,
        command: 'console',
        url: running.url,
        urls: running.urls,
        exposed: running.exposed,
        open: fromEnv ? null : running.loginUrl,
      });
    else
      process.stdout.write(
        `pg-settle console: open ${shown}\n(the address works once; Enter prints a new one; Ctrl-C stops the console)\n`,
      );
    const lines = offerNewSignIns(running, (open) => {
      if (input.json) printJson({ ok: true, command: 'console', url: running.url, open });
      else process.stdout.write(`pg-settle console: a new sign-in address (works once, for 15 minutes): ${open}\n`);
    });
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
    lines.close();
    await running.close();
    await db.close();
    return EXIT.ok;
  },
};
