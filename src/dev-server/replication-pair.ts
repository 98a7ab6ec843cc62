import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { appendFile, chown, mkdir, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';
import { withDatabase } from '../db/database-url.js';
import { withPgClient } from '../db/with-pg-client.js';
import {
  DEBIAN_PG_BIN_DIR,
  initCluster,
  type RunningServer,
  startServerOnFreePort,
  trySignal,
} from './local-cluster.js';
import { resolveRunAs, type RunAs } from './run-as.js';

const execFileAsync = promisify(execFile);

export { DEBIAN_PG_BIN_DIR };
export const STANDBY_NAME = 'standby1';
const SLOT_NAME = 'standby1_slot';
const READY_TIMEOUT_MS = 60_000;

/** Binaries a primary/standby pair needs; the first one missing is the capability to name. */
const REQUIRED_BINARIES = ['initdb', 'postgres', 'pg_basebackup'] as const;

/** Why replication cannot run here (a missing binary), or undefined when it can. */
export function replicationUnavailableReason(binDir = DEBIAN_PG_BIN_DIR): string | undefined {
  const missing = REQUIRED_BINARIES.find((name) => !existsSync(path.join(binDir, name)));
  if (missing !== undefined)
    return `streaming replication needs ${path.join(binDir, missing)} (Debian postgresql-15), not found`;
  if (process.getuid === undefined) return 'local clusters need a POSIX platform';
  return undefined;
}

/** One running server of the pair (a direct child of this process, run as the `postgres` OS user). */
export interface PgNode {
  readonly name: string;
  readonly port: number;
  readonly dataDir: string;
  /** The server's log (removed with the data directories when the pair stops). */
  readonly logFile: string;
  /** Superuser connection string to database `db` (default `postgres`). */
  url(db?: string): string;
  /** Pid of the postmaster. */
  readonly pid: number;
  /** True until the postmaster exited. */
  running(): boolean;
  /** SIGKILL the postmaster and every backend it had started, as a host crash would. Resolves when all are gone. */
  crash(): Promise<number>;
  /** Fast shutdown (SIGINT), SIGKILL after a grace period. */
  stop(): Promise<void>;
}

export interface ReplicationPair {
  readonly primary: PgNode;
  readonly standby: PgNode;
  /** synchronous_standby_names was `standby1` (remote_apply) rather than empty. */
  readonly synchronous: boolean;
  /** Stops both servers and deletes every data directory (idempotent). */
  stop(): Promise<void>;
}

export interface ReplicationPairOptions {
  /** Synchronous standby with synchronous_commit = remote_apply, else an asynchronous standby. */
  readonly synchronous: boolean;
  readonly binDir?: string;
  readonly log?: (msg: string) => void;
}

/**
 * A primary (wal_level=replica, a physical replication slot, synchronous_standby_names =
 * 'standby1' and synchronous_commit = remote_apply when `synchronous`) and a hot standby made
 * with `pg_basebackup -R -X stream -S <slot>` whose primary_conninfo carries
 * application_name=standby1. Resolves once the standby streams (and is `sync` when asked).
 */
export async function startReplicationPair(opts: ReplicationPairOptions): Promise<ReplicationPair> {
  const binDir = opts.binDir ?? DEBIAN_PG_BIN_DIR;
  const log = opts.log ?? (() => {});
  const unavailable = replicationUnavailableReason(binDir);
  if (unavailable !== undefined) throw new Error(unavailable);

  const runAs = await resolveRunAs(log);
  const baseDir = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-replication-'));
  const nodes: PgNode[] = [];
  const removeAll = async (): Promise<void> => {
    await Promise.all(nodes.map((node) => node.stop()));
    await rm(baseDir, { recursive: true, force: true });
  };

  try {
    await chown(baseDir, runAs.uid, runAs.gid);
    const primaryDir = path.join(baseDir, 'primary');
    const standbyDir = path.join(baseDir, 'standby');
    await initCluster(binDir, primaryDir, runAs, baseDir, log);

    // In postgresql.conf rather than on the command line: command-line settings outrank
    // ALTER SYSTEM, and a promoted standby must be able to drop synchronous_standby_names.
    // pg_basebackup copies this file to the standby.
    await appendFile(
      path.join(primaryDir, 'postgresql.conf'),
      [
        "listen_addresses = '127.0.0.1'",
        'max_connections = 50',
        'fsync = off', // a killed process loses nothing the OS holds; no host crash is simulated
        'wal_level = replica',
        'max_wal_senders = 5',
        'max_replication_slots = 5',
        'hot_standby = on',
        'wal_receiver_status_interval = 1s',
        `synchronous_standby_names = '${opts.synchronous ? STANDBY_NAME : ''}'`,
        `synchronous_commit = ${opts.synchronous ? 'remote_apply' : 'on'}`,
        '',
      ].join('\n'),
    );
    const primary = await startNode({ name: 'primary', binDir, baseDir, dataDir: primaryDir, runAs, log });
    nodes.push(primary);
    await withPgClient(primary.url(), (c) => c.query('select pg_create_physical_replication_slot($1)', [SLOT_NAME]));

    const backup = runAs.wrap(path.join(binDir, 'pg_basebackup'), [
      '-h',
      '127.0.0.1',
      '-p',
      String(primary.port),
      '-U',
      'postgres',
      '-D',
      standbyDir,
      '-X',
      'stream',
      '-S',
      SLOT_NAME,
      '-R',
      '--no-sync',
      '-c',
      'fast',
    ]);
    await execFileAsync(backup.command, backup.args, { cwd: baseDir });
    await appendFile(
      path.join(standbyDir, 'postgresql.auto.conf'),
      `primary_conninfo = '${primaryConninfo(primary.port)}'\nprimary_slot_name = '${SLOT_NAME}'\n`,
    );
    await chown(path.join(standbyDir, 'postgresql.auto.conf'), runAs.uid, runAs.gid);

    const standby = await startNode({ name: 'standby', binDir, baseDir, dataDir: standbyDir, runAs, log });
    nodes.push(standby);
    await waitForStandby(primary, opts.synchronous);
    log(
      `replication pair ready: primary :${primary.port}, ${opts.synchronous ? 'synchronous' : 'asynchronous'} standby :${standby.port}`,
    );

    let stopped: Promise<void> | undefined;
    return {
      primary,
      standby,
      synchronous: opts.synchronous,
      stop: () => (stopped ??= removeAll()),
    };
  } catch (error) {
    await removeAll().catch(() => {});
    throw error;
  }
}

export function primaryConninfo(port: number): string {
  return `host=127.0.0.1 port=${port} user=postgres application_name=${STANDBY_NAME}`;
}

/** Resolves once the primary sees `standby1` streaming (and `sync`, when asked). */
export async function waitForStandby(
  primary: PgNode,
  synchronous: boolean,
  timeoutMs = READY_TIMEOUT_MS,
): Promise<void> {
  await pollUntil(
    primary.url(),
    timeoutMs,
    `standby ${STANDBY_NAME} streaming${synchronous ? ' as sync' : ''}`,
    async (c) => {
      const { rows } = await c.query<{ state: string; sync_state: string }>(
        'select state, sync_state from pg_stat_replication where application_name = $1',
        [STANDBY_NAME],
      );
      return rows.some((r) => r.state === 'streaming' && (!synchronous || r.sync_state === 'sync'));
    },
  );
}

/**
 * Cuts the standby off its primary: empties primary_conninfo (reloadable since PostgreSQL 13),
 * which stops the walreceiver, and resolves once no walreceiver runs. WAL the primary writes
 * from now on never reaches the standby.
 */
export async function detachStandby(standby: PgNode, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
  await withPgClient(standby.url(), async (c) => {
    await c.query(`alter system set primary_conninfo = ''`);
    await c.query('select pg_reload_conf()');
  });
  await pollUntil(standby.url(), timeoutMs, 'walreceiver stopped', async (c) => {
    const { rows } = await c.query<{ n: number }>('select count(*)::int as n from pg_stat_wal_receiver');
    return rows[0]?.n === 0;
  });
}

/**
 * Promotes the standby (`pg_promote(wait => true)`) and resolves once it accepts writes.
 * The new primary has no standby of its own, so it stops waiting for one:
 * synchronous_standby_names is emptied (else every commit would block on `standby1`).
 */
export async function promote(standby: PgNode, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
  await withPgClient(standby.url(), async (c) => {
    const { rows } = await c.query<{ promoted: boolean }>('select pg_promote(true, $1) as promoted', [
      Math.ceil(timeoutMs / 1000),
    ]);
    if (rows[0]?.promoted !== true) throw new Error('pg_promote did not finish in time');
    await c.query(`alter system set synchronous_standby_names = ''`);
    await c.query('select pg_reload_conf()');
  });
  await pollUntil(standby.url(), timeoutMs, 'standby out of recovery', async (c) => {
    const { rows } = await c.query<{ r: boolean }>('select pg_is_in_recovery() as r');
    return rows[0]?.r === false;
  });
}

// ---------------------------------------------------------------------------------------

interface NodeRequest {
  readonly name: string;
  readonly binDir: string;
  readonly baseDir: string;
  readonly dataDir: string;
  readonly runAs: RunAs;
  readonly log: (msg: string) => void;
}

/** Starts one node with the local cluster's start-up; its settings are in postgresql.conf. */
async function startNode(req: NodeRequest): Promise<PgNode> {
  const socketDir = path.join(req.baseDir, `${req.name}-socket`);
  await mkdir(socketDir, { recursive: true });
  await chown(socketDir, req.runAs.uid, req.runAs.gid);
  const logFile = path.join(req.baseDir, `${req.name}.log`);
  const server = await startServerOnFreePort({
    binDir: req.binDir,
    dataDir: req.dataDir,
    socketDir,
    logFile,
    settings: [],
    runAs: req.runAs,
    cwd: req.baseDir,
    cleanupDirs: [],
    log: req.log,
  });
  req.log(`${req.name} ready on 127.0.0.1:${server.port} (pid ${server.pid})`);
  return makeNode(req.name, req.dataDir, logFile, server);
}

function makeNode(name: string, dataDir: string, logFile: string, server: RunningServer): PgNode {
  const { port, pid } = server;
  let gone = false;
  void server.exited.then(() => (gone = true));
  const url = (db = 'postgres'): string => withDatabase(server.adminUrl, db);
  return {
    name,
    port,
    dataDir,
    logFile,
    pid,
    url,
    running: () => !gone,
    crash: async () => {
      server.unregisterExitHook();
      // Children first listed, then everyone SIGKILLed: nothing gets to flush, ack or clean up.
      const children = await childPids(pid);
      trySignal(pid, 'SIGKILL');
      for (const childPid of children) trySignal(childPid, 'SIGKILL');
      // Poll rather than await `exited`: the child is unref'd and must not be the only thing
      // keeping the event loop alive.
      for (const gonePid of [pid, ...children]) await waitGone(gonePid);
      return children.length + 1;
    },
    stop: async () => {
      server.unregisterExitHook();
      if (gone) return;
      trySignal(pid, 'SIGINT');
      await waitGone(pid, 10_000);
      trySignal(pid, 'SIGKILL');
      await waitGone(pid);
    },
  };
}

async function childPids(parent: number): Promise<number[]> {
  const found: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // Field 4 of /proc/<pid>/stat is the ppid; the command (field 2) is parenthesised and may hold spaces.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === parent) found.push(Number(entry));
  }
  return found;
}

async function waitGone(pid: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    // A killed backend whose parent is gone may linger as a zombie until someone reaps it.
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    if (stat === '' || stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function pollUntil(
  url: string,
  timeoutMs: number,
  what: string,
  check: (c: pg.Client) => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await withPgClient(url, async (c) => {
    for (;;) {
      if (await check(c)) return;
      if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  });
}
