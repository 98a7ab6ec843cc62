import type { BenchOptions } from './args.js';
import { runClientCycle } from './client-cycle.js';
import { CPU_LOOPS, CPU_SCRIPTS, measureCpuLoop, measureCpuScript } from './cpu.js';
import { checkpoint, seedReplayKeys, type BenchServer, type RunDatabase } from './database.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { genericChecks, measurePgbench, measureWindow, perOp, type PgbenchMeasurement } from './measure.js';
import { generateScaleRows } from './scale-rows.js';
import type { BaselineScenario, RunResult } from './types.js';
import {
  completedOperations,
  unfinishedOperations,
  verifyBaseline,
  verifyFreshKeyCycles,
  verifyHotkey,
  verifyPkread,
  verifyReplay,
  verifySpec4,
} from './verify.js';

export interface ScenarioContext {
  readonly server: BenchServer;
  /** Path of pgbench, or undefined when it is not installed (pgbench scenarios are skipped). */
  readonly pgbench: string | undefined;
  readonly opts: BenchOptions;
  /** Verbose-only log (provisioning, generation batches). */
  readonly log: (msg: string) => void;
  /** Always printed: progress of long steps. */
  readonly progress: (msg: string) => void;
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

/** The fields every pgbench measurement takes from the options. */
function common(
  ctx: ScenarioContext,
  clients: number,
  round: number,
): Pick<PgbenchMeasurement, 'pgbench' | 'clients' | 'threads' | 'length' | 'warmup' | 'round'> {
  return {
    pgbench: requirePgbench(ctx),
    clients,
    threads: ctx.opts.threads,
    length: ctx.opts.length,
    warmup: ctx.opts.warmup,
    round,
  };
}

/** floor2, spec4, lww, stripe: plain SQL baselines. */
export function runBaseline(
  ctx: ScenarioContext,
  scenario: BaselineScenario,
  clients: number,
  round: number,
): Promise<RunResult> {
  return inFreshDatabase(ctx, `${scenario}_${clients}`, (db) =>
    measurePgbench({
      ...common(ctx, clients, round),
      db,
      scenario,
      label: scenario,
      script: `${scenario}.sql`,
      verify: (client, run) =>
        scenario === 'spec4' ? verifySpec4(client, run) : verifyBaseline(client, scenario, run),
    }),
  );
}

/** cycle (two transactions) and local (one transaction with a ledger insert) on fresh keys. */
export function runEngineCycle(
  ctx: ScenarioContext,
  scenario: 'cycle' | 'local',
  clients: number,
  round: number,
): Promise<RunResult> {
  return inFreshDatabase(ctx, `${scenario}_${clients}`, (db) =>
    measurePgbench({
      ...common(ctx, clients, round),
      db,
      scenario,
      label: scenario,
      script: `${scenario}.sql`,
      verify: (client, run) => verifyFreshKeyCycles(client, { ...run, preexisting: 0, completedBefore: 0 }),
    }),
  );
}

/** Claims of already completed keys: the keys are completed first, in one statement. */
const replayKeys = (ctx: ScenarioContext): number => (ctx.opts.quick ? 2_000 : 20_000);

export function runReplay(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  const keys = replayKeys(ctx);
  return inFreshDatabase(ctx, `replay_${clients}`, async (db) => {
    await seedReplayKeys(db.url, keys);
    await withPgClient(db.url, (client) =>
      client.query('vacuum (analyze) settle_private.operations, settle_private.attempts, settle_private.audit_log'),
    );
    return measurePgbench({
      ...common(ctx, clients, round),
      db,
      scenario: 'replay',
      label: 'replay',
      script: 'replay.sql',
      defines: { replay_keys: keys },
      verify: (client, run) => verifyReplay(client, { processed: run.processed, keys }),
    });
  });
}

/**
 * pkread: the plain primary-key read the replay target compares with. The same keys are
 * completed through the API as for replay, and their operation rows copied to bench.pkread,
 * so both scenarios read a table of the same size, rows and primary key. `latencyFloor`: the
 * run at the hotkey's client count, labelled `pkread@hotkey`, whose p99 is what the machine's
 * scheduler alone gives the cheapest statement at that concurrency (the hotkey target's floor).
 */
export function runPkread(
  ctx: ScenarioContext,
  clients: number,
  round: number,
  latencyFloor = false,
): Promise<RunResult> {
  const keys = replayKeys(ctx);
  return inFreshDatabase(ctx, `pkread_${clients}`, async (db) => {
    await seedReplayKeys(db.url, keys);
    await withPgClient(db.url, async (client) => {
      await client.query('insert into bench.pkread select * from settle_private.operations');
      await client.query('vacuum (analyze) bench.pkread');
    });
    return measurePgbench({
      ...common(ctx, clients, round),
      db,
      scenario: 'pkread',
      label: latencyFloor ? 'pkread@hotkey' : 'pkread',
      script: 'pkread.sql',
      defines: { replay_keys: keys },
      latencyLog: latencyFloor,
      verify: (client) => verifyPkread(client, keys),
    });
  });
}

/**
 * Server CPU per cycle of the engine or of the same rows in plain SQL, one backend
 * (bench/lib/cpu.ts), reported as a run at 1 client whose tps is operations per CPU-second.
 * `loop` (the target): bench/sql/cycle-cpu-loop.sql against spec4-cpu-loop.sql,
 * one DO block each, no commits. `call` (reference): the pgbench scripts cycle.sql and
 * spec4.sql sent statement by statement, each its own transaction, so per-transaction costs
 * (PL/pgSQL expression set-up, executor start, commit) are counted too.
 */
export function runCpu(
  ctx: ScenarioContext,
  side: keyof typeof CPU_SCRIPTS,
  kind: 'loop' | 'call',
  round: number,
): Promise<RunResult> {
  const perCall = ctx.opts.quick ? 300 : 1500;
  return inFreshDatabase(ctx, `cpu_${kind}_${side}`, async (db) => {
    const m = await withPgClient(db.url, (client) =>
      kind === 'loop' ? measureCpuLoop(client, CPU_LOOPS[side]) : measureCpuScript(client, CPU_SCRIPTS[side], perCall),
    );
    // A per-call measurement's warm-up operations are in the database too.
    const processed = m.operations + (kind === 'call' ? Math.max(1, Math.floor(perCall / 5)) : 0);
    const verification = await withPgClient(db.url, (client) =>
      side === 'cycle'
        ? verifyFreshKeyCycles(client, { processed, maxInFlight: 0, preexisting: 0, completedBefore: 0 })
        : verifySpec4(client, { processed, maxInFlight: 0 }),
    );
    return {
      scenario: 'cpu',
      label: kind === 'loop' ? `cpu:${side}` : `cpu-call:${side}`,
      clients: 1,
      round,
      driver: 'pgbench',
      durationS: (m.wallUsPerOp * m.operations) / 1e6,
      transactionsPerClient: m.operations,
      warmupS: 0,
      tps: 1e6 / m.cpuUsPerOp,
      processed: m.operations,
      failed: 0,
      retried: 0,
      latencyAverageMs: null,
      latencyStddevMs: null,
      p50Ms: null,
      p99Ms: null,
      walBytesPerOp: null,
      fpiPerOp: null,
      checkpointsDuring: 0,
      statements: [],
      // cpuFromSchedstat 0: the server is not on this machine, the wall time stands in for its CPU.
      counters: {
        cpuUsPerOp: m.cpuUsPerOp,
        wallUsPerOp: m.wallUsPerOp,
        cpuFromSchedstat: m.source === 'schedstat' ? 1 : 0,
        ...verification.counters,
      },
      checks: verification.checks,
    };
  });
}

/** Many clients on a handful of keys; a new key per slot every second (an epoch). */
export function runHotkey(ctx: ScenarioContext, round: number): Promise<RunResult> {
  const clients = ctx.opts.hotkeyClients;
  return inFreshDatabase(ctx, `hotkey_${clients}`, (db) =>
    measurePgbench({
      ...common(ctx, clients, round),
      db,
      scenario: 'hotkey',
      label: 'hotkey',
      script: 'hotkey.sql',
      defines: { hot_keys: ctx.opts.hotKeys, epoch_ms: 1000 },
      latencyLog: true,
      verify: (client) => verifyHotkey(client),
    }),
  );
}

/**
 * `cycle` with 0, 1M, 10M (quick: 0, 100k) pre-existing operation records. Every level's
 * rows are generated once into its own database, which every round and client count then
 * reuses (a run adds a few thousand operations to millions: negligible); per client count the
 * levels run alternately, round after round (0, N, 0, N, ...), so each ratio compares runs
 * seconds apart, not a generation apart.
 */
export async function runScale(
  ctx: ScenarioContext,
  clientCounts: readonly number[],
  record: (run: RunResult) => void,
): Promise<void> {
  const levels: { rows: number; db: RunDatabase }[] = [];
  try {
    for (const rows of ctx.opts.scaleRows) {
      const db = await ctx.server.createRunDatabase(`scale_${rows}`);
      levels.push({ rows, db });
      const started = Date.now();
      await generateScaleRows(db.url, { rows, log: ctx.progress });
      if (rows > 0)
        ctx.progress(
          `scale: ${rows} pre-existing operations generated in ${((Date.now() - started) / 1000).toFixed(1)} s`,
        );
    }
    for (const clients of clientCounts) {
      for (let round = 1; round <= ctx.opts.repeat; round++) {
        for (const { rows, db } of levels) {
          // A level runs many times in the same database: count only what is new.
          const completedBefore = await withPgClient(db.url, completedOperations);
          const inFlightBefore = await withPgClient(db.url, unfinishedOperations);
          record(
            await measurePgbench({
              ...common(ctx, clients, round),
              db,
              scenario: 'scale',
              label: `scale@${rows}`,
              script: 'cycle.sql',
              scaleRows: rows,
              verify: (client, run) =>
                verifyFreshKeyCycles(client, { ...run, preexisting: inFlightBefore, completedBefore }),
            }),
          );
        }
      }
    }
  } finally {
    for (const { db } of levels) await db.drop();
  }
}

/** The TypeScript side driving the same cycle with the same concurrency (warm-up included). */
export function runClient(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult> {
  return inFreshDatabase(ctx, `client_${clients}`, async (db) => {
    await checkpoint(db.url);
    const warmup = ctx.opts.warmup === null ? null : await runClientCycle(db.url, clients, ctx.opts.warmup);
    const { result, window } = await measureWindow(db.url, () => runClientCycle(db.url, clients, ctx.opts.length));
    const verification = await withPgClient(db.url, (client) =>
      verifyFreshKeyCycles(client, {
        processed: result.processed + (warmup?.processed ?? 0),
        maxInFlight: clients * (warmup === null ? 1 : 2),
        preexisting: 0,
        completedBefore: 0,
      }),
    );
    return {
      scenario: 'client',
      label: 'client',
      clients,
      round,
      driver: result.driver,
      durationS: result.elapsedS,
      transactionsPerClient: ctx.opts.length.kind === 'transactions' ? ctx.opts.length.perClient : null,
      warmupS: warmup?.elapsedS ?? 0,
      tps: result.tps,
      processed: result.processed,
      failed: 0,
      retried: 0,
      latencyAverageMs: result.latencyAverageMs,
      latencyStddevMs: null,
      p50Ms: result.p50Ms,
      p99Ms: result.p99Ms,
      ...perOp(window, result.processed),
      statements: result.statements,
      counters: verification.counters,
      checks: [...genericChecks(0, 0, window.deadlocks), ...verification.checks],
    };
  });
}
