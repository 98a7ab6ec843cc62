import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/**
 * Who runs initdb/postgres. PostgreSQL refuses to run as root, so as root we switch to the
 * `postgres` OS user with `runuser`; otherwise commands run as the current user.
 */
export interface RunAs {
  /** uid/gid that must own the data directory and socket directory. */
  readonly uid: number;
  readonly gid: number;
  /** Name of the user, for messages. */
  readonly user: string;
  /** Turns `command args...` into what to spawn (wrapped in `runuser` when switching user). */
  wrap(command: string, args: readonly string[]): { command: string; args: string[] };
}

const POSTGRES_OS_USER = 'postgres';

export async function resolveRunAs(log: (msg: string) => void): Promise<RunAs> {
  const uid = process.getuid?.();
  const gid = process.getgid?.();
  if (uid === undefined || gid === undefined) {
    throw new Error('Local PostgreSQL clusters need a POSIX platform (process.getuid is missing)');
  }
  if (uid !== 0) {
    return {
      uid,
      gid,
      user: `uid ${uid}`,
      wrap: (command, args) => ({ command, args: [...args] }),
    };
  }

  const runuser = ['/usr/sbin/runuser', '/sbin/runuser', '/usr/bin/runuser'].find((p) => existsSync(p));
  if (runuser === undefined) {
    throw new Error(
      'Running as root, but `runuser` (util-linux) was not found: cannot start PostgreSQL as a non-root user',
    );
  }
  const ids = await osUserIds(POSTGRES_OS_USER, log);
  return {
    ...ids,
    user: POSTGRES_OS_USER,
    wrap: (command, args) => ({ command: runuser, args: ['-u', POSTGRES_OS_USER, '--', command, ...args] }),
  };
}

async function osUserIds(user: string, log: (msg: string) => void): Promise<{ uid: number; gid: number }> {
  const lookup = async (): Promise<{ uid: number; gid: number } | undefined> => {
    try {
      const [{ stdout: u }, { stdout: g }] = await Promise.all([
        execFileAsync('id', ['-u', user]),
        execFileAsync('id', ['-g', user]),
      ]);
      return { uid: Number(u.trim()), gid: Number(g.trim()) };
    } catch {
      return undefined;
    }
  };

  const found = await lookup();
  if (found !== undefined) return found;

  log(`OS user '${user}' does not exist; creating it with useradd --system --no-create-home`);
  try {
    await execFileAsync('useradd', ['--system', '--no-create-home', user]);
  } catch (error) {
    throw new Error(
      `Running as root and OS user '${user}' does not exist; creating it failed (${String(error)}). ` +
        `Create it yourself (useradd --system --no-create-home ${user}) or set DATABASE_URL.`,
    );
  }
  const created = await lookup();
  if (created === undefined) throw new Error(`OS user '${user}' still missing after useradd`);
  return created;
}
