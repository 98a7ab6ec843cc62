import path from 'node:path';
import type pg from 'pg';
import { checkpoint, readServerCounters, walBytesBetween, withClient, BENCH_DIR, type RunDatabase } from './database.js';
import { percentile, runPgbench } from './pgbench.js';
import type { Check, RunResult, ScenarioName } from './types.js';
import { check } from './verify.js';

export interface Verification {
  readonly counters: Record<string, number>;
  readonly checks: Check[];
}

export interface PgbenchMeasurement {
  readonly pgbench: string;
  readonly db: RunDatabase;
  readonly scenario: ScenarioName;
  readonly label: string;
  /** File name in bench/scripts. */
  readonly script: string;
  readonly clients: number;
  readonly threads: number;
  readonly durationS: number;
  readonly defines?: Readonly<Record<string, string | number>>;
  readonly latencyLog?: boolean;
  readonly scaleRows?: number;
  readonly verify: (db: pg.Client, run: { processed: number; clients: number }) => Promise<Verification>;
}

export const scriptPath = (name: string): string => path.join(BENCH_DIR, 'scripts', name);

/**
 * One pgbench run on a prepared database: CHECKPOINT, WAL position and deadlock counter
 * before/after, pgbench, then the scenario's correctness counters plus the generic ones
 * (no failed or retried transactions, no deadlocks).
 */
export async function measurePgbench(m: PgbenchMeasurement): Promise<RunResult> {
  await checkpoint(m.db.url);
  const before = await readServerCounters(m.db.url);
  const run = await runPgbench({
    pgbench: m.pgbench,
    url: m.db.url,
    script: scriptPath(m.script),
    clients: m.clients,
    threads: m.threads,
    durationS: m.durationS,
    protocol: 'prepared',
    maxTries: 3,
    ...(m.defines === undefined ? {} : { defines: m.defines }),
    latencyLog: m.latencyLog ?? false,
  });
  const after = await readServerCounters(m.db.url);
  const out = run.output;
  const walBytes = await walBytesBetween(m.db.url, before.walLsn, after.walLsn);
  const verification = await withClient(m.db.url, (db) => m.verify(db, { processed: out.processed, clients: m.clients }));
  const latenciesMs = run.latenciesUs?.map((us) => us / 1000) ?? [];
  return {
    scenario: m.scenario,
    label: m.label,
    clients: m.clients,
    driver: 'pgbench',
    durationS: m.durationS,
    tps: out.tps ?? 0,
    processed: out.processed,
    failed: out.failed,
    retried: out.retriedTransactions ?? 0,
    latencyAverageMs: out.latencyAverageMs,
    latencyStddevMs: out.latencyStddevMs,
    p50Ms: percentile(latenciesMs, 50),
    p99Ms: percentile(latenciesMs, 99),
    walBytesPerOp: out.processed > 0 ? walBytes / out.processed : null,
    statements: out.statements.filter((s) => !s.command.startsWith('\\')).map((s) => ({ command: s.command, latencyMs: s.latencyMs })),
    counters: verification.counters,
    checks: [...genericChecks(out.failed, out.retriedTransactions ?? 0, after.deadlocks - before.deadlocks), ...verification.checks],
    ...(m.scaleRows === undefined ? {} : { scaleRows: m.scaleRows }),
  };
}

export function genericChecks(failed: number, retried: number, deadlocks: number): Check[] {
  return [
    check('no failed transactions', failed === 0, `${failed} failed`),
    check('no retried transactions', retried === 0, `${retried} retried`),
    check('no deadlocks', deadlocks === 0, `${deadlocks} deadlocks (pg_stat_database)`),
  ];
}
