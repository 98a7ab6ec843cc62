import path from 'node:path';
import type pg from 'pg';
import {
  checkpoint,
  readServerCounters,
  walBytesBetween,
  BENCH_DIR,
  type RunDatabase,
  type ServerCounters,
} from './database.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { percentile, runPgbench, type PgbenchRunOptions } from './pgbench.js';
import type { Check, RunLength, RunResult, ScenarioName } from './types.js';
import { check } from './verify.js';

export interface Verification {
  readonly counters: Record<string, number>;
  readonly checks: Check[];
}

/** What a scenario's correctness check gets: every transaction processed in this database. */
export interface ProcessedRuns {
  /** Transactions processed by the warm-up and the measured run together. */
  readonly processed: number;
  /** Operations a cut-off run may leave unfinished: clients x pgbench invocations. */
  readonly maxInFlight: number;
}

export interface PgbenchMeasurement {
  readonly pgbench: string;
  readonly db: RunDatabase;
  readonly scenario: ScenarioName;
  readonly label: string;
  /** File name in bench/scripts, or an absolute path (a generated script: the ladder's steps). */
  readonly script: string;
  readonly clients: number;
  readonly threads: number;
  readonly length: RunLength;
  /** Unmeasured run of the same script after the CHECKPOINT (null = none). */
  readonly warmup: RunLength | null;
  readonly round: number;
  readonly defines?: Readonly<Record<string, string | number>>;
  readonly latencyLog?: boolean;
  readonly scaleRows?: number;
  readonly verify: (db: pg.Client, run: ProcessedRuns) => Promise<Verification>;
}

/** A script of bench/scripts by name; an absolute path is taken as it is. */
export const scriptPath = (name: string): string =>
  path.isAbsolute(name) ? name : path.join(BENCH_DIR, 'scripts', name);

/** Counter deltas of one measured window: WAL bytes, full-page images, checkpoints, deadlocks. */
export interface MeasuredWindow {
  readonly walBytes: number;
  readonly fpi: number;
  readonly checkpoints: number;
  readonly deadlocks: number;
}

export async function measureWindow<T>(
  url: string,
  fn: () => Promise<T>,
): Promise<{ result: T; window: MeasuredWindow }> {
  const before = await readServerCounters(url);
  const result = await fn();
  const after = await readServerCounters(url);
  return { result, window: windowBetween(before, after, await walBytesBetween(url, before.walLsn, after.walLsn)) };
}

const windowBetween = (before: ServerCounters, after: ServerCounters, walBytes: number): MeasuredWindow => ({
  walBytes,
  fpi: after.walFpi - before.walFpi,
  checkpoints: after.checkpoints - before.checkpoints,
  deadlocks: after.deadlocks - before.deadlocks,
});

/**
 * One pgbench run on a prepared database: CHECKPOINT, an unmeasured warm-up of the same
 * script (its first touches of each page after the checkpoint write the full-page images),
 * then the measured run between WAL/FPI/checkpoint/deadlock counters, then the scenario's
 * correctness counters plus the generic ones (no failed or retried transactions, no deadlocks).
 */
export async function measurePgbench(m: PgbenchMeasurement): Promise<RunResult> {
  await checkpoint(m.db.url);
  const base: PgbenchRunOptions = {
    pgbench: m.pgbench,
    url: m.db.url,
    script: scriptPath(m.script),
    clients: m.clients,
    threads: m.threads,
    protocol: 'prepared',
    maxTries: 3,
    ...(m.defines === undefined ? {} : { defines: m.defines }),
  };
  const warmup = m.warmup === null ? null : await runPgbench({ ...base, ...pgbenchLength(m.warmup) });
  const { result: run, window } = await measureWindow(m.db.url, () =>
    runPgbench({ ...base, ...pgbenchLength(m.length), latencyLog: m.latencyLog ?? false }),
  );
  const out = run.output;
  const warmupProcessed = warmup?.output.processed ?? 0;
  const verification = await withPgClient(m.db.url, (db) =>
    m.verify(db, { processed: warmupProcessed + out.processed, maxInFlight: m.clients * (warmup === null ? 1 : 2) }),
  );
  const latenciesMs = run.latenciesUs?.map((us) => us / 1000) ?? [];
  const failed = out.failed + (warmup?.output.failed ?? 0);
  const retried = (out.retriedTransactions ?? 0) + (warmup?.output.retriedTransactions ?? 0);
  return {
    scenario: m.scenario,
    label: m.label,
    clients: m.clients,
    round: m.round,
    driver: 'pgbench',
    durationS: run.elapsedS,
    transactionsPerClient: m.length.kind === 'transactions' ? m.length.perClient : null,
    warmupS: warmup?.elapsedS ?? 0,
    tps: out.tps ?? 0,
    processed: out.processed,
    failed: out.failed,
    retried: out.retriedTransactions ?? 0,
    latencyAverageMs: out.latencyAverageMs,
    latencyStddevMs: out.latencyStddevMs,
    p50Ms: percentile(latenciesMs, 50),
    p99Ms: percentile(latenciesMs, 99),
    ...perOp(window, out.processed),
    statements: out.statements
      .filter((s) => !s.command.startsWith('\\'))
      .map((s) => ({ command: s.command, latencyMs: s.latencyMs })),
    counters: verification.counters,
    checks: [...genericChecks(failed, retried, window.deadlocks), ...verification.checks],
    ...(m.scaleRows === undefined ? {} : { scaleRows: m.scaleRows }),
  };
}

const pgbenchLength = (length: RunLength): Pick<PgbenchRunOptions, 'durationS' | 'transactionsPerClient'> =>
  length.kind === 'seconds' ? { durationS: length.seconds } : { transactionsPerClient: length.perClient };

export function perOp(
  window: MeasuredWindow,
  processed: number,
): Pick<RunResult, 'walBytesPerOp' | 'fpiPerOp' | 'checkpointsDuring'> {
  return {
    walBytesPerOp: processed > 0 ? window.walBytes / processed : null,
    fpiPerOp: processed > 0 ? window.fpi / processed : null,
    checkpointsDuring: window.checkpoints,
  };
}

export function genericChecks(failed: number, retried: number, deadlocks: number): Check[] {
  return [
    check('no failed transactions', failed === 0, `${failed} failed`),
    check('no retried transactions', retried === 0, `${retried} retried`),
    check('no deadlocks', deadlocks === 0, `${deadlocks} deadlocks (pg_stat_database)`),
  ];
}
