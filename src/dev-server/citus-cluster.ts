import { existsSync } from 'node:fs';
import path from 'node:path';
import { withPgClient } from '../db/with-pg-client.js';
import { DEBIAN_PG_BIN_DIR as DEBIAN_BIN_DIR, startLocalCluster, type LocalCluster } from './local-cluster.js';

const DEBIAN_LIB_DIR = '/usr/lib/postgresql/15/lib';
const DEBIAN_EXTENSION_DIR = '/usr/share/postgresql/15/extension';

/** Settings every Citus node of a throwaway cluster runs with. */
export const CITUS_NODE_SETTINGS: readonly string[] = [
  'shared_preload_libraries=citus,pg_stat_statements',
  // Citus commits multi-node transactions with two-phase commit.
  'max_prepared_transactions=200',
  // One worker connection per coordinator backend is plenty for key-routed calls.
  'citus.max_shared_pool_size=200',
];

/**
 * Why a throwaway Citus cluster cannot start here (the missing piece, named), or undefined when
 * it can: the Debian PostgreSQL 15 server binaries and the Citus extension built for them
 * (citus.so and citus.control; see docs/scale-out.md for how to build it).
 */
export function citusUnavailableReason(): string | undefined {
  if (process.getuid === undefined) return 'local clusters need a POSIX platform';
  if (!existsSync(path.join(DEBIAN_BIN_DIR, 'initdb'))) {
    return `the Citus suite needs PostgreSQL 15 server binaries in ${DEBIAN_BIN_DIR} (Debian postgresql-15), not found`;
  }
  const so = path.join(DEBIAN_LIB_DIR, 'citus.so');
  const control = path.join(DEBIAN_EXTENSION_DIR, 'citus.control');
  if (!existsSync(so) || !existsSync(control)) {
    return `the Citus suite needs the citus extension for PostgreSQL 15 (${so} and ${control}), not installed; see docs/scale-out.md`;
  }
  return undefined;
}

/**
 * Why the PostgreSQL 15 installation whose bin directory is `binDir` cannot run a Citus node
 * (the missing file, named), or undefined when it can: its initdb and postgres, and a Citus
 * build in its sibling lib directory (citus.so) with the extension's files in ../share.
 */
export function citusBuildUnavailableReason(binDir: string): string | undefined {
  const so = path.join(binDir, '..', 'lib', 'citus.so');
  const control = path.join(binDir, '..', '..', '..', '..', 'share', 'postgresql', '15', 'extension', 'citus.control');
  for (const [file, what] of [
    [path.join(binDir, 'initdb'), 'initdb'],
    [so, 'citus.so'],
    [control, 'citus.control'],
  ] as const) {
    if (!existsSync(file)) {
      return `the Citus build of ${binDir} is missing: no ${what} (${path.normalize(file)}); build it as docs/scale-out.md says ("The patched Citus")`;
    }
  }
  return undefined;
}

export interface CitusNode {
  readonly name: string;
  /** Superuser connection string to database `postgres` of this node. */
  readonly adminUrl: string;
  readonly port: number;
  /** Data directory (its postmaster.pid names the node's postmaster). */
  readonly dataDir: string;
}

export interface CitusCluster {
  readonly coordinator: CitusNode;
  readonly workers: readonly CitusNode[];
  /** Stops every node and deletes their data directories (idempotent). */
  stop(): Promise<void>;
}

export interface CitusClusterOptions {
  readonly workers?: number;
  readonly log?: (msg: string) => void;
  /**
   * PostgreSQL 15 `bin` directory of another installation (default the Debian one), e.g. a
   * relocated copy whose `../lib/citus.so` is a patched Citus build (bench:citus --citus-bin).
   * Its sibling `lib` directory is the extensions' directory.
   */
  readonly binDir?: string;
}

/**
 * A throwaway Citus cluster: a coordinator and `workers` workers (default 2), each its own
 * local PostgreSQL 15 cluster (see startLocalCluster) with citus preloaded, trust auth on
 * 127.0.0.1; `create extension citus` in database `postgres` on every node, the coordinator
 * registered with citus_set_coordinator_host and each worker with citus_add_node.
 */
export async function startCitusCluster(opts: CitusClusterOptions = {}): Promise<CitusCluster> {
  const log = opts.log ?? (() => {});
  const binDir = opts.binDir ?? DEBIAN_BIN_DIR;
  const libDir = opts.binDir === undefined ? DEBIAN_LIB_DIR : path.join(opts.binDir, '..', 'lib');
  const unavailable = opts.binDir === undefined ? citusUnavailableReason() : citusBuildUnavailableReason(opts.binDir);
  if (unavailable !== undefined) throw new Error(unavailable);
  const count = opts.workers ?? 2;
  const names = ['coordinator', ...Array.from({ length: count }, (_, i) => `worker${i + 1}`)];
  const started = await Promise.allSettled(
    names.map((name) =>
      startLocalCluster({
        binDir,
        libDirs: [libDir],
        extraSettings: CITUS_NODE_SETTINGS,
        log: (msg) => log(`${name}: ${msg}`),
      }),
    ),
  );
  const clusters = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const stopAll = async (): Promise<void> => {
    await Promise.all(clusters.map((c) => c.stop().catch(() => {})));
  };
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed !== undefined) {
    await stopAll();
    throw failed.reason;
  }
  const nodes = (clusters as LocalCluster[]).map((c, i) => ({
    name: names[i] as string,
    adminUrl: c.adminUrl,
    port: Number(new URL(c.adminUrl).port),
    dataDir: c.dataDir,
  }));
  const [coordinator, ...workers] = nodes as [CitusNode, ...CitusNode[]];
  try {
    await Promise.all(
      nodes.map((n) => withPgClient(n.adminUrl, (c) => c.query('create extension if not exists citus'))),
    );
    await withPgClient(coordinator.adminUrl, async (c) => {
      await c.query('select citus_set_coordinator_host($1, $2)', ['127.0.0.1', coordinator.port]);
      for (const w of workers) await c.query('select citus_add_node($1, $2)', ['127.0.0.1', w.port]);
    });
    log(`Citus coordinator on ${coordinator.port}, workers on ${workers.map((w) => w.port).join(', ')}`);
  } catch (error) {
    await stopAll();
    throw error;
  }
  let stopping: Promise<void> | undefined;
  return { coordinator, workers, stop: () => (stopping ??= stopAll()) };
}

/** A worker of a running Citus cluster: how Citus names it (`host:port`) and how to reach it. */
export interface CitusWorkerNode {
  /** `nodename:nodeport` as registered in pg_dist_node (what Citus connects to). */
  readonly node: string;
  /** Superuser connection string to `database` on it. */
  readonly url: string;
}

/**
 * The primary workers of a running Citus cluster, in pg_dist_node order. Their URLs are the
 * registered host and port with the coordinator URL's user and database, unless `urls` (same
 * order) says how to reach them from here (e.g. published Docker ports).
 */
export async function citusWorkerNodes(coordinatorUrl: string, urls?: readonly string[]): Promise<CitusWorkerNode[]> {
  return withPgClient(coordinatorUrl, async (c) => {
    const { rows } = await c.query<{ nodename: string; nodeport: number }>(
      `select nodename, nodeport from pg_dist_node where noderole = 'primary' and groupid <> 0 order by nodeid`,
    );
    return rows.map((r, i) => {
      const given = urls?.[i];
      const url = new URL(coordinatorUrl);
      url.hostname = r.nodename;
      url.port = String(r.nodeport);
      return { node: `${r.nodename}:${r.nodeport}`, url: given ?? url.toString() };
    });
  });
}
