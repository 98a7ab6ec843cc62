import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdir, mkdtemp, open, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { onProcessExit } from './exit-hooks.js';
import { findFreePort } from './free-port.js';
import { resolveRunAs, type RunAs } from './run-as.js';
import { waitForPostgres } from './wait-for-postgres.js';

const execFileAsync = promisify(execFile);

/** Where Debian's postgresql-15 package puts the server binaries. */
export const DEBIAN_PG_BIN_DIR = '/usr/lib/postgresql/15/bin';

export interface LocalClusterOptions {
  /** Directory holding `initdb` and `postgres`. */
  readonly binDir: string;
  /** Directories where extension libraries (pg_stat_statements.so) may live. */
  readonly libDirs: readonly string[];
  readonly log: (msg: string) => void;
  /** Extra temp directories (e.g. a copy of the binaries) removed by stop(). */
  readonly ownedDirs?: readonly string[];
  /** Extra `-c name=value` server settings, after the defaults (e.g. a Citus node's preload). */
  readonly extraSettings?: readonly string[];
}

export interface LocalCluster {
  readonly adminUrl: string;
  readonly dataDir: string;
  stop(): Promise<void>;
}

const START_ATTEMPTS = 5;
const READY_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 10_000;

/**
 * A throwaway PostgreSQL cluster: temp data dir, trust auth, a free port on 127.0.0.1, a private
 * socket dir, `postgres` started as a direct child (no pg_ctl daemon). stop() shuts it down
 * (SIGINT = fast shutdown, SIGKILL after a grace period) and deletes every temp directory.
 */
export async function startLocalCluster(opts: LocalClusterOptions): Promise<LocalCluster> {
  const { binDir, log } = opts;
  const runAs = await resolveRunAs(log);
  const baseDir = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-cluster-'));
  const dataDir = path.join(baseDir, 'data');
  const socketDir = path.join(baseDir, 'socket');
  const logFile = path.join(baseDir, 'server.log');
  const ownedDirs = [baseDir, ...(opts.ownedDirs ?? [])];
  const removeOwnedDirs = async (): Promise<void> => {
    await Promise.all(ownedDirs.map((dir) => rm(dir, { recursive: true, force: true })));
  };

  try {
    await mkdir(socketDir);
    await chown(baseDir, runAs.uid, runAs.gid);
    await chown(socketDir, runAs.uid, runAs.gid);

    await initCluster(binDir, dataDir, runAs, baseDir, log);

    const server = await startServerOnFreePort({
      binDir,
      dataDir,
      socketDir,
      logFile,
      settings: [...serverSettings(opts.libDirs), ...(opts.extraSettings ?? [])],
      runAs,
      cwd: baseDir,
      cleanupDirs: ownedDirs,
      log,
    });
    log(`PostgreSQL ready on 127.0.0.1:${server.port} (data ${dataDir}, run as ${runAs.user})`);
    const stop = once(async () => {
      server.unregisterExitHook();
      await server.shutdown();
      // A test may have restarted the server out of band (pg_ctl restart, see node-control.ts):
      // then the postmaster is not our child, and its data directory names it.
      await stopPostmasterOf(dataDir);
      await removeOwnedDirs();
    });
    return { adminUrl: server.adminUrl, dataDir, stop };
  } catch (error) {
    await removeOwnedDirs().catch(() => {});
    throw error;
  }
}

/** initdb as `runAs`: trust auth, UTF8, C.UTF-8 locale (or no locale where C.UTF-8 is missing). */
export async function initCluster(
  binDir: string,
  dataDir: string,
  runAs: RunAs,
  cwd: string,
  log: (msg: string) => void,
): Promise<void> {
  const initdb = path.join(binDir, 'initdb');
  const common = ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync'];
  const attempts: readonly (readonly string[])[] = [['--locale=C.UTF-8'], ['--no-locale']];
  let lastError = '';
  for (const localeArgs of attempts) {
    const { command, args } = runAs.wrap(initdb, [...common, ...localeArgs]);
    try {
      await execFileAsync(command, args, { cwd, env: { ...process.env, LC_ALL: 'C' } });
      log(`initdb ${localeArgs.join(' ')} done in ${dataDir}`);
      return;
    } catch (error) {
      lastError = errorOutput(error);
      if (!/locale/i.test(lastError)) break;
      log(`initdb ${localeArgs.join(' ')} failed on the locale; retrying without it`);
      await rm(dataDir, { recursive: true, force: true });
    }
  }
  throw new Error(`initdb failed:\n${lastError}`);
}

function serverSettings(libDirs: readonly string[]): string[] {
  const settings = [
    'listen_addresses=127.0.0.1',
    'max_connections=300',
    'shared_buffers=128MB',
    'fsync=on',
    'synchronous_commit=on',
  ];
  if (libDirs.some((dir) => existsSync(path.join(dir, 'pg_stat_statements.so')))) {
    settings.push('shared_preload_libraries=pg_stat_statements');
  }
  return settings;
}

export interface ServerRequest {
  readonly binDir: string;
  readonly dataDir: string;
  readonly socketDir: string;
  readonly logFile: string;
  readonly settings: readonly string[];
  readonly runAs: RunAs;
  readonly cwd: string;
  /** Removed by a detached shell if Node exits without stop(). */
  readonly cleanupDirs: readonly string[];
  readonly log: (msg: string) => void;
}

/** A postmaster started by startServerOnFreePort(), a direct (unref'd) child of this process. */
export interface RunningServer {
  readonly port: number;
  /** Superuser connection string to the database `postgres`. */
  readonly adminUrl: string;
  /** Pid of the postmaster. */
  readonly pid: number;
  /** Resolves when the child process exited. */
  readonly exited: Promise<void>;
  /** SIGINT (fast shutdown), SIGKILL after a grace period; resolves once it exited. */
  shutdown(): Promise<void>;
  /** Forgets the exit hook that kills the server if Node exits first. */
  unregisterExitHook(): void;
}

/**
 * `postgres -D dataDir` on a free port of 127.0.0.1 (another port when the one picked was taken
 * before postgres bound it), with `settings` as `-c` options; resolves once it accepts
 * connections. The server is killed if Node exits first (see onProcessExit).
 */
export async function startServerOnFreePort(req: ServerRequest): Promise<RunningServer> {
  for (let attempt = 1; ; attempt++) {
    const port = await findFreePort();
    const started = await startServer(req, port);
    if (started.ok) return started.server;
    if (started.portClash && attempt < START_ATTEMPTS) {
      req.log(`port ${port} was taken before postgres bound it; retrying with another port`);
      continue;
    }
    throw new Error(`${started.reason}\n--- server log (${req.logFile}) ---\n${started.serverLog}`);
  }
}

type StartResult =
  | { ok: true; server: RunningServer }
  | { ok: false; portClash: boolean; reason: string; serverLog: string };

async function startServer(req: ServerRequest, port: number): Promise<StartResult> {
  const args = ['-D', req.dataDir, '-c', `port=${port}`, '-c', `unix_socket_directories=${req.socketDir}`];
  for (const setting of req.settings) args.push('-c', setting);
  const { command, args: wrappedArgs } = req.runAs.wrap(path.join(req.binDir, 'postgres'), args);

  const logHandle = await open(req.logFile, 'a');
  let child: ChildProcess;
  try {
    child = spawn(command, wrappedArgs, { cwd: req.cwd, stdio: ['ignore', logHandle.fd, logHandle.fd] });
  } finally {
    await logHandle.close();
  }
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    child.once('exit', () => resolve());
    child.once('error', () => resolve());
  });
  let spawnError: Error | undefined;
  child.once('error', (error) => (spawnError = error));
  // The cluster must not keep Node alive on its own; the exit hook below kills it when Node goes.
  child.unref();

  // Until the postmaster pid is known, signal our direct child (runuser forwards a SIGTERM).
  let postmasterPid: number | undefined;
  const unregisterExitHook = onProcessExit(() => killOnExit(child, postmasterPid, req.cleanupDirs));

  const adminUrl = `postgresql://postgres@127.0.0.1:${port}/postgres`;
  try {
    await waitForPostgres(adminUrl, {
      timeoutMs: READY_TIMEOUT_MS,
      abortReason: () =>
        spawnError !== undefined
          ? `could not spawn ${command}: ${spawnError.message}`
          : child.exitCode !== null || child.signalCode !== null
            ? `postgres exited during startup (code ${child.exitCode}, signal ${child.signalCode})`
            : undefined,
    });
  } catch (error) {
    unregisterExitHook();
    await signalAndWait(child, undefined, exited);
    const serverLog = await readFile(req.logFile, 'utf8').catch(() => '');
    return {
      ok: false,
      portClash: /Address already in use|could not create any TCP\/IP sockets|could not bind/i.test(serverLog),
      reason: error instanceof Error ? error.message : String(error),
      serverLog: serverLog.split('\n').slice(-60).join('\n'),
    };
  }

  postmasterPid = await readPostmasterPid(req.dataDir);
  const pid = postmasterPid ?? child.pid ?? 0;
  return {
    ok: true,
    server: {
      port,
      adminUrl,
      pid,
      exited,
      unregisterExitHook,
      shutdown: () => signalAndWait(child, postmasterPid, exited),
    },
  };
}

/** SIGINT (fast shutdown) to the postmaster, SIGKILL after a grace period, then wait for exit. */
async function signalAndWait(
  child: ChildProcess,
  postmasterPid: number | undefined,
  exited: Promise<void>,
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const target = postmasterPid ?? child.pid;
  if (target === undefined) return;
  trySignal(target, 'SIGINT');
  let timer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), STOP_GRACE_MS);
  });
  const outcome = await Promise.race([exited.then(() => 'exited' as const), graceOver]);
  clearTimeout(timer);
  if (outcome === 'timeout') {
    trySignal(target, 'SIGKILL');
    if (child.pid !== undefined && child.pid !== target) trySignal(child.pid, 'SIGKILL');
    await exited;
  }
}

function killOnExit(child: ChildProcess, postmasterPid: number | undefined, cleanupDirs: readonly string[]): void {
  // SIGQUIT = immediate shutdown: the postmaster takes its backends down with it.
  const target = postmasterPid ?? child.pid;
  if (target !== undefined) trySignal(target, postmasterPid === undefined ? 'SIGTERM' : 'SIGQUIT');
  // Remove the temp dirs once the server is gone, from a detached shell that outlives us.
  if (target !== undefined) {
    const script = `i=0; while kill -0 ${target} 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; rm -rf "$@"`;
    spawn('sh', ['-c', script, 'sh', ...cleanupDirs], { detached: true, stdio: 'ignore' }).unref();
  }
}

export function trySignal(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** SIGINT (fast shutdown) to the postmaster named by `dataDir`'s postmaster.pid, if one runs; SIGKILL after a grace period. */
export async function stopPostmasterOf(dataDir: string): Promise<void> {
  const pid = await readPostmasterPid(dataDir);
  if (pid === undefined || !isAlive(pid)) return;
  trySignal(pid, 'SIGINT');
  const deadline = Date.now() + STOP_GRACE_MS;
  while (isAlive(pid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  if (isAlive(pid)) trySignal(pid, 'SIGKILL');
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function readPostmasterPid(dataDir: string): Promise<number | undefined> {
  try {
    const firstLine = (await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0];
    const pid = Number(firstLine);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function errorOutput(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const { stderr, stdout, message } = error as { stderr?: unknown; stdout?: unknown; message?: unknown };
    return [message, stdout, stderr].filter((part) => typeof part === 'string' && part !== '').join('\n');
  }
  return String(error);
}

function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= fn());
}
