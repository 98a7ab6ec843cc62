import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { withPgClient } from '../db/with-pg-client.js';
import { resolveRunAs } from './run-as.js';
import { waitForPostgres } from './wait-for-postgres.js';

const execFileAsync = promisify(execFile);

/** A throwaway server stopped by stopServer(): start() brings it back on the same port and data. */
export interface StoppedServer {
  start(): Promise<void>;
}

/**
 * Stops the local server behind `adminUrl` (a superuser URL) with `pg_ctl stop -m fast`, for tests
 * of a node going away (a Citus worker or coordinator). The server must run on this machine from
 * a data directory this process can reach; start() runs it again with the command line it had
 * (postmaster.opts) and resolves once it accepts connections. The harness's stop() finds the
 * restarted postmaster through its data directory (local-cluster.ts, stopPostmasterOf).
 */
export async function stopServer(adminUrl: string): Promise<StoppedServer> {
  const { dataDir, binDir } = await withPgClient(adminUrl, async (c) => {
    const { rows } = await c.query<{ data_dir: string; bin_dir: string }>(
      `select current_setting('data_directory') as data_dir, (select setting from pg_config where name = 'BINDIR') as bin_dir`,
    );
    const row = rows[0];
    if (row === undefined) throw new Error(`stopServer: ${adminUrl} did not name its data directory`);
    return { dataDir: row.data_dir, binDir: row.bin_dir };
  });
  const options = await readFile(path.join(dataDir, 'postmaster.opts'), 'utf8');
  const runAs = await resolveRunAs(() => {});
  const pgCtl = path.join(binDir, 'pg_ctl');
  const run = async (args: readonly string[]): Promise<void> => {
    const { command, args: wrapped } = runAs.wrap(pgCtl, [...args]);
    await execFileAsync(command, wrapped, { cwd: path.dirname(dataDir) });
  };
  await run(['stop', '-D', dataDir, '-m', 'fast', '-w', '-t', '120']);
  // postmaster.opts: the binary, then its arguments shell-quoted ("-D" "/tmp/..." "-c" "port=...").
  const postmasterArgs = options.trim().replace(/^\S+\s*/, '');
  return {
    async start() {
      await run([
        'start',
        '-D',
        dataDir,
        '-w',
        '-t',
        '120',
        '-l',
        path.join(path.dirname(dataDir), 'restarted.log'),
        '-o',
        postmasterArgs,
      ]);
      await waitForPostgres(adminUrl, { timeoutMs: 60_000, abortReason: () => undefined });
    },
  };
}
