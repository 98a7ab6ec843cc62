import type { BenchOptions } from './args.js';
import { runClientCycle } from './client-cycle.js';
import { checkpoint, readServerCounters, walBytesBetween, withClient, type BenchServer, type RunDatabase } from './database.js';
import { genericChecks, measurePgbench } from './measure.js';
import { generateScaleRows } from './scale-rows.js';
import type { RunResult } from './types.js';
import { completedOperations, verifyBaseline, verifyFreshKeyCycles, verifyHotkey, verifyReplay } from './verify.js';

export interface ScenarioContext {
  readonly server: BenchServer;
  /** Path of pgbench, or undefined when it is not installed (pgbench scenarios are skipped). */
  readonly pgbench: string | undefined;
  readonly opts: BenchOptions;
  readonly log: (msg: string) => void;
}

async function inFreshDatabase<T>(ctx: ScenarioContext, hint: string, fn: (db: RunDatabase) => Promise<T>): Promise<T> {
  const db = await ctx.server.createRunDatabase(hint);
  try {
    return await fn(db);
  } finally {
    await db.drop();
  }
}

function requirePgbench(ctx: ScenarioContext): string {
  if (ctx.pgbench === undefined) throw new Error('pgbench scenario requested without pgbench');
  return ctx.pgbench;
}

/** floor2, lww, stripe: plain SQL baselines. */
export function runBaseline(ctx: ScenarioContext, scenario: 'floor2' | 'lww' | 'stripe', clients: number): Promise<RunResult> {
  return inFreshDatabase(ctx, `${scenario}_${clients}`, (db) =>
    measurePgbench({
      pgbench: requirePgbench(ctx),
      db,
      scenario,
      label: scenario,
      script: `${scenario}.sql`,
      clients,
      threads: ctx.opts.threads,
      durationS: ctx.opts.durationS,
      verify: (client, run) => verifyBaseline(client, scenario, run),
    }),
  );
}

/** cycle (two transactions) and local (one transaction with a ledger insert) on fresh keys. */
export function runEngineCycle(ctx: ScenarioContext, scenario: 'cycle' | 'local', clients: number): Promise<RunResult> {
  return inFreshDatabase(ctx, `${scenario}_${clients}`, (db) =>
    measurePgbench({
      pgbench: requirePgbench(ctx),
      db,
      scenario,
      label: scenario,
      script: `${scenario}.sql`,
      clients,
      threads: ctx.opts.threads,
      durationS: ctx.opts.durationS,
      verify: (client, run) => verifyFreshKeyCycles(client, { ...run, preexisting: 0, completedBefore: 0 }),
    }),
  );
}

/** Claims of already completed keys: the keys are completed first, in one statement. */
export function runReplay(ctx: ScenarioContext, clients: number): Promise<RunResult> {
  const keys = ctx.opts.quick ? 2_000 : 20_000;
  return inFreshDatabase(ctx, `replay_${clients}`, async (db) => {
    await withClient(db.url, async (client) => {
      await client.query(
        `select count(*) from generate_series(1, $1::int) i,
           lateral settle.claim('bench', 'replay-' || i, jsonb_build_object('amount', i, 'currency', 'EUR'), 'bench-app',
                                array['payments.write'], 0, interval '30 seconds', 'setup', 5) c,
           lateral settle.complete('bench', 'replay-' || i, c.attempt, c.lease_token, c.fingerprint, 'bench-app',
                                   array['payments.write'], 0, jsonb_build_object('charge', 'ch-' || i)) r`,
        [keys],
      );
      await client.query('vacuum (analyze) settle_private.operations, settle_private.attempts, settle_private.audit_log');
    });
    return measurePgbench({
      pgbench: requirePgbench(ctx),
      db,
      scenario: 'replay',
      label: 'replay',
      script: 'replay.sql',
      clients,
      threads: ctx.opts.threads,
      durationS: ctx.opts.durationS,
      defines: { replay_keys: keys },
      verify: (client, run) => verifyReplay(client, { processed: run.processed, keys }),
    });
  });
}

/** Many clients on a handful of keys; a new key per slot every second (an epoch). */
export function runHotkey(ctx: ScenarioContext): Promise<RunResult> {
  const clients = ctx.opts.hotkeyClients;
  return inFreshDatabase(ctx, `hotkey_${clients}`, (db) =>
    measurePgbench({
      pgbench: requirePgbench(ctx),
      db,
      scenario: 'hotkey',
      label: 'hotkey',
      script: 'hotkey.sql',
      clients,
      threads: ctx.opts.threads,
      durationS: ctx.opts.durationS,
      defines: { hot_keys: ctx.opts.hotKeys, epoch_ms: 1000 },
      latencyLog: true,
      verify: (client) => verifyHotkey(client),
    }),
  );
}

/**
 * `cycle` with 0, 1M, 10M (quick: 0, 100k) pre-existing operation records. Every level gets
 * its own database, generated first; then the levels run back to back per client count, so
 * each ratio compares runs minutes apart, not a generation apart.
 */
export async function runScale(ctx: ScenarioContext, clientCounts: readonly number[]): Promise<RunResult[]> {
  const pgbench = requirePgbench(ctx);
  const levels: { rows: number; db: RunDatabase }[] = [];
  try {
    for (const rows of ctx.opts.scaleRows) {
      const db = await ctx.server.createRunDatabase(`scale_${rows}`);
      levels.push({ rows, db });
      const started = Date.now();
      await generateScaleRows(db.url, { rows, log: ctx.log });
      if (rows > 0) ctx.log(`scale: ${rows} pre-existing operations generated in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    }
    const results: RunResult[] = [];
    for (const clients of clientCounts) {
      for (const { rows, db } of levels) {
        // A level runs once per client count in the same database: count only what is new.
        const completedBefore = await withClient(db.url, completedOperations);
        results.push(
          await measurePgbench({
            pgbench,
            db,
            scenario: 'scale',
            label: `scale@${rows}`,
            script: 'cycle.sql',
            clients,
            threads: ctx.opts.threads,
            durationS: ctx.opts.durationS,
            scaleRows: rows,
            verify: (client, run) => verifyFreshKeyCycles(client, { ...run, preexisting: rows, completedBefore }),
          }),
        );
      }
    }
    return results;
  } finally {
    for (const { db } of levels) await db.drop();
  }
}

/** The TypeScript side driving the same cycle with the same concurrency. */
export function runClient(ctx: ScenarioContext, clients: number): Promise<RunResult> {
  return inFreshDatabase(ctx, `client_${clients}`, async (db) => {
    await checkpoint(db.url);
    const before = await readServerCounters(db.url);
    const result = await runClientCycle(db.url, clients, ctx.opts.durationS);
    const after = await readServerCounters(db.url);
    const walBytes = await walBytesBetween(db.url, before.walLsn, after.walLsn);
    const verification = await withClient(db.url, (client) =>
      verifyFreshKeyCycles(client, { processed: result.processed, clients, preexisting: 0, completedBefore: 0 }),
    );
    return {
      scenario: 'client',
      label: 'client',
      clients,
      driver: result.driver,
      durationS: ctx.opts.durationS,
      tps: result.tps,
      processed: result.processed,
      failed: 0,
      retried: 0,
      latencyAverageMs: result.latencyAverageMs,
      latencyStddevMs: null,
      p50Ms: result.p50Ms,
      p99Ms: result.p99Ms,
      walBytesPerOp: result.processed > 0 ? walBytes / result.processed : null,
      statements: result.statements,
      counters: verification.counters,
      checks: [...genericChecks(0, 0, after.deadlocks - before.deadlocks), ...verification.checks],
    };
  });
}
