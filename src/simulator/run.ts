import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createSettleClient } from '../client/client.js';
import type { TelemetryOptions } from '../client/telemetry.js';
import { readEngineState } from '../checker/engine-state.js';
import { checkHistory, type CheckReport } from './checker.js';
import { FAULTS, type FaultName, type SimulatorConfig } from './config.js';
import type { History, IntendedOperation } from './history.js';
import { createLedger } from './ledger.js';
import { histogram, summarizeLatency, type LatencySummary } from './metrics.js';
import { Recorder } from './recorder.js';
import { planOperations, type OperationPlan } from './schedule.js';
import { TaskQueue } from './task-queue.js';
import { runNaive, type NaiveTally } from './naive.js';
import { createRecordingPool } from './recording-pool.js';
import { startSimReconciler } from './reconciliation.js';
import {
  installRewardsSql,
  readDeliveries,
  startFeedConsumer,
  startNaivePoller,
  tallyConsumer,
  type FeedConsumer,
  type FeedConsumerTally,
  type NaivePoller,
  type PollerTally,
} from './rewards.js';
import { operationTask } from './worker.js';
import { groupByKey, keyOf } from '../checker/invariants.js';
import { resolutions } from '../checker/outcomes.js';

export interface SimulationOptions {
  readonly config: SimulatorConfig;
  /** A superuser or settle_admin + settle_app connection to a migrated database. */
  readonly connectionString: string;
  /** Turn off the downstream's idempotency (demonstrates that the checker catches double pay). */
  readonly unsafeDownstream?: boolean;
  /** The client's OpenTelemetry metrics and spans (default: the global providers, if any). */
  readonly telemetry?: TelemetryOptions | false;
  /** Also run the naive last-write-wins baseline on the same plans, for the side-by-side (default true). */
  readonly baseline?: boolean;
  /** Called about four times a second while operations run. */
  readonly onProgress?: (progress: SimulationProgress) => void;
}

export interface SimulationProgress {
  readonly issued: number;
  readonly final: number;
  readonly total: number;
  readonly elapsedMs: number;
}

export interface FaultRow {
  readonly fault: FaultName;
  readonly rate: number;
  /** Operations whose plan holds the fault (among those issued). */
  readonly planned: number;
  /** Times the fault was actually injected. */
  readonly injected: number;
  /** What followed, counted: engine answers to the calls the fault caused, downstream deduplications. */
  readonly answers: Readonly<Record<string, number>>;
}

export interface SimulationReport {
  readonly ok: boolean;
  readonly seed: number;
  readonly config: SimulatorConfig;
  readonly unsafeDownstream: boolean;
  readonly tenantPrefix: string;
  readonly operations: {
    readonly planned: number;
    readonly issued: number;
    readonly completed: number;
    readonly failed: number;
    readonly other: number;
  };
  readonly timing: {
    readonly workloadMs: number;
    readonly checkMs: number;
    readonly throughputOpsPerSec: number;
  };
  readonly latency: { readonly run: LatencySummary; readonly claim: LatencySummary; readonly settle: LatencySummary };
  readonly attemptsPerOperation: {
    readonly mean: number;
    readonly max: number;
    readonly histogram: Readonly<Record<string, number>>;
  };
  readonly engineCalls: number;
  /** What the callers' run() calls answered, by outcome (and reason). */
  readonly runOutcomes: Readonly<Record<string, number>>;
  readonly sweeper: { readonly runs: number; readonly leasesExpired: number };
  readonly payouts: { readonly rows: number; readonly credited: number; readonly deduplicated: number };
  readonly faults: readonly FaultRow[];
  readonly check: CheckReport;
  /**
   * The same plans settled by a naive last-write-wins upsert (naive.ts) next to pg-settle's
   * counts of the same defects (from the invariant violations); null when not run.
   */
  readonly comparison: {
    readonly naive: NaiveTally;
    readonly pgSettle: {
      readonly doublePayouts: number;
      readonly downgradedOutcomes: number;
      readonly lostResults: number;
      readonly conflictingPayloadsAccepted: number;
    };
  } | null;
  /**
   * The reward workers downstream (rewards.ts): the feed consumer, killed and restarted mid-batch,
   * held to feed-exactly-once; the naive settled_at poller beside it (null without the baseline).
   */
  readonly consumers: { readonly feed: FeedConsumerTally; readonly naive: PollerTally | null };
  /**
   * What the reconciler did (reconciliation.ts): operations that needed reconciliation, how they
   * were resolved (from the audit trail), those left undecided at the end, and its lookups.
   */
  readonly reconciliation: {
    readonly needed: number;
    readonly resolvedCompleted: number;
    readonly resolvedFailed: number;
    readonly undecided: number;
    readonly sweeps: number;
    readonly lookupsTimedOut: number;
  };
  /** Unexpected exceptions while running (each also makes the report red). */
  readonly errors: { readonly count: number; readonly first: readonly string[] };
}

/**
 * Runs the seeded, fault-injected workload against a migrated database, reads back what the
 * engine and the ledger hold, and checks the invariants.
 */
export async function runSimulation(options: SimulationOptions): Promise<SimulationReport> {
  const { config } = options;
  const plans = planOperations(config);
  const tenantPrefix = `sim${config.seed}-${Date.now().toString(36)}${randomBytes(2).toString('hex')}-`;
  const pool = new pg.Pool({ connectionString: options.connectionString, max: config.workers + 4 });
  pool.on('error', () => {});
  const recorder = new Recorder();
  // The public client over a pool that records every engine answer (recording-pool.ts).
  const settlePool = await createRecordingPool(options.connectionString, config.workers + 2, recorder);
  const client = createSettleClient({
    pool: settlePool,
    ...(options.telemetry === undefined ? {} : { telemetry: options.telemetry }),
  });
  const zombies: Promise<void>[] = [];
  const ledger = createLedger(pool, { idempotent: options.unsafeDownstream !== true });

  const tenants = Array.from({ length: config.tenants }, (_, i) => `${tenantPrefix}t${i}`);
  const feedConsumerName = `${tenantPrefix}rewards`;
  let feed: FeedConsumer | null = null;
  let naive: NaivePoller | null = null;
  try {
    await ledger.install();
    await installRewardsSql(pool);
    const intended: IntendedOperation[] = [];
    const plansByKey = new Map(
      plans.map((plan) => [keyOf({ tenant: `${tenantPrefix}${plan.tenant}`, key: plan.key }), plan]),
    );
    const reconciler = startSimReconciler({
      client,
      tenantPrefix,
      ledger,
      slowFirstLookup: (tenant, key) => plansByKey.get(keyOf({ tenant, key }))?.variant === 'paid-slow-lookup',
      onError: (error) => recorder.error(error),
    });
    feed = await startFeedConsumer({
      pool,
      connectionString: options.connectionString,
      name: feedConsumerName,
      tenants,
      seed: config.seed,
      killRate: CONSUMER_KILL_RATE,
      processes: 2,
      onError: (error) => recorder.error(error),
    });
    if (options.baseline !== false) {
      naive = startNaivePoller({
        pool,
        name: `${tenantPrefix}naive-poller`,
        tenantPrefix,
        intervalMs: 50,
        onError: (error) => recorder.error(error),
      });
    }
    const issuedPlans: OperationPlan[] = [];
    let final = 0;
    const started = performance.now();
    const deadline = config.durationMs === null ? Infinity : started + config.durationMs;

    let nextPlan = 0;
    const queue: TaskQueue = new TaskQueue(
      config.workers,
      () => {
        const plan = plans[nextPlan];
        if (plan === undefined || performance.now() >= deadline) return undefined;
        nextPlan += 1;
        issuedPlans.push(plan);
        const op = operationTask(context, plan);
        intended.push(op.intended);
        return op.task;
      },
      (error) => recorder.error(error),
    );
    const context = {
      client,
      ledger,
      probes: pool,
      queue,
      recorder,
      config,
      tenantPrefix,
      onFinal: () => {
        final += 1;
      },
      naive,
      reconciled: reconciler.reconciled,
      zombies: {
        track(stall: Promise<void>): Promise<void> {
          zombies.push(stall.catch((error: unknown) => recorder.error(error)));
          return stall;
        },
      },
    };

    const sweeper = startSweeper(client, recorder, config.sweepIntervalMs);
    const progress = setInterval(() => {
      options.onProgress?.({ issued: nextPlan, final, total: plans.length, elapsedMs: performance.now() - started });
    }, 250);
    try {
      await queue.run();
      // Stalled attempts wake once their operation is final (or after a few leases).
      for (let seen = 0; seen < zombies.length; seen = zombies.length) await Promise.all(zombies.slice(seen));
      await queue.run();
    } finally {
      clearInterval(progress);
      await sweeper.stop();
      await reconciler.stop();
    }
    const workloadMs = performance.now() - started;
    options.onProgress?.({ issued: nextPlan, final, total: plans.length, elapsedMs: workloadMs });
    // Every outcome has committed: the reward workers catch up, then stop.
    await feed.drainAndStop(60_000);
    await naive?.finish();

    const checkStarted = performance.now();
    const [engine, payouts, deliveries] = await Promise.all([
      readEngineState(pool, { tenantPrefix }),
      ledger.readBack(tenantPrefix),
      readDeliveries(pool, tenantPrefix),
    ]);
    const history: History = {
      intended,
      told: recorder.told,
      ...engine,
      payouts,
      deliveries,
      consumers: [feedConsumerName],
    };
    const check = checkHistory(history);
    const checkMs = performance.now() - checkStarted;

    const violations = (name: string): number => check.invariants.find((i) => i.name === name)?.violationCount ?? 0;
    const comparison =
      options.baseline === false
        ? null
        : {
            naive: await runNaive({
              pool,
              ledger,
              config,
              plans: issuedPlans,
              tenantPrefix: tenantPrefix.replace(/^sim/, 'naive'),
            }),
            pgSettle: {
              doublePayouts: violations('no-double-pay'),
              downgradedOutcomes: violations('status-monotonic'),
              lostResults: violations('no-lost-payout') + violations('acknowledged-completion-durable'),
              conflictingPayloadsAccepted: violations('conflict-discloses-nothing'),
            },
          };

    const completedKeys = new Set(engine.operations.filter((op) => op.status === 'completed').map(keyOf));
    const feedTally = tallyConsumer(feedConsumerName, completedKeys, deliveries);
    const feedRows = deliveries.filter((row) => row.consumer === feedConsumerName);
    const decided = [...groupByKey(engine.audit).values()].flatMap((rows) => resolutions(rows).slice(0, 1));
    const leftUndecided = engine.operations.filter(
      (op) => op.deadLettered && (op.status === 'unknown' || op.status === 'conflict'),
    ).length;
    const completed = completedKeys.size;
    const failed = engine.operations.filter((op) => op.status === 'failed').length;
    const attempts = engine.operations.map((op) => op.attempt);
    return {
      ok: check.ok && recorder.errorCount === 0,
      seed: config.seed,
      config,
      unsafeDownstream: options.unsafeDownstream === true,
      tenantPrefix,
      operations: {
        planned: plans.length,
        issued: intended.length,
        completed,
        failed,
        other: intended.length - completed - failed,
      },
      timing: {
        workloadMs: Math.round(workloadMs),
        checkMs: Math.round(checkMs),
        throughputOpsPerSec: Math.round((completed / (workloadMs / 1000)) * 10) / 10,
      },
      latency: {
        run: summarizeLatency(recorder.runLatencyMs),
        claim: summarizeLatency(recorder.claimLatencyMs),
        settle: summarizeLatency(recorder.settleLatencyMs),
      },
      runOutcomes: Object.fromEntries([...recorder.runOutcomes.entries()].sort(([a], [b]) => a.localeCompare(b))),
      attemptsPerOperation: {
        mean:
          attempts.length === 0 ? 0 : Math.round((attempts.reduce((a, b) => a + b, 0) / attempts.length) * 1000) / 1000,
        max: attempts.reduce((max, a) => Math.max(max, a), 0),
        histogram: histogram(attempts),
      },
      engineCalls: recorder.told.length,
      sweeper: { runs: recorder.sweeps, leasesExpired: recorder.sweptLeases },
      payouts: {
        rows: payouts.length,
        credited: payouts.filter((p) => p.credited).length,
        deduplicated: payouts.filter((p) => !p.credited).length,
      },
      faults: faultTable(config, issuedPlans, recorder),
      consumers: {
        feed: {
          ...feedTally,
          events: feedRows.length,
          failedOutcomes: feedRows.filter((row) => row.status === 'failed').length,
          batches: feed.stats.batches,
          kills: feed.stats.kills,
          processes: feed.stats.processes,
        },
        naive:
          naive === null
            ? null
            : {
                ...tallyConsumer(`${tenantPrefix}naive-poller`, completedKeys, deliveries),
                polls: naive.stats.polls,
                heldPast: naive.stats.heldPast,
              },
      },
      reconciliation: {
        needed: decided.length + leftUndecided,
        resolvedCompleted: decided.filter((row) => row.statusAfter === 'completed').length,
        resolvedFailed: decided.filter((row) => row.statusAfter === 'failed').length,
        undecided: leftUndecided,
        sweeps: reconciler.stats.sweeps,
        lookupsTimedOut: reconciler.stats.results.check_timeout,
      },
      check,
      comparison,
      errors: { count: recorder.errorCount, first: recorder.errors },
    };
  } finally {
    await feed?.stop();
    await naive?.finish();
    if (feed !== null) await pool.query('select settle.drop_consumer(name => $1)', [feedConsumerName]).catch(() => {});
    await client.end();
    await settlePool.end();
    await pool.end();
  }
}

/** The reward consumer's processes are killed mid-batch at this rate (by batch number, seeded). */
const CONSUMER_KILL_RATE = 0.05;

function faultTable(config: SimulatorConfig, issued: readonly OperationPlan[], recorder: Recorder): FaultRow[] {
  return FAULTS.map(({ name }) => {
    const planned = issued.filter((plan) =>
      name === 'duplicate'
        ? plan.duplicates > 0
        : name === 'different-payload'
          ? plan.conflictingAmountCents !== null
          : name === 'binding-bump'
            ? plan.bindingBump
            : plan.fate === name,
    ).length;
    const answers = Object.fromEntries(
      [...(recorder.consequences.get(name) ?? new Map<string, number>()).entries()].sort(([a], [b]) =>
        a.localeCompare(b),
      ),
    );
    return { fault: name, rate: config.faults[name], planned, injected: recorder.injected.get(name) ?? 0, answers };
  });
}

/** Calls settle.expire_leases periodically, as an operator's cron would. */
function startSweeper(
  client: ReturnType<typeof createSettleClient>,
  recorder: Recorder,
  intervalMs: number,
): { stop(): Promise<void> } {
  let stopped = false;
  let current: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    if (stopped) return;
    current = current.then(async () => {
      if (stopped) return;
      try {
        const swept = await client.expireLeases({ batchSize: 1000 });
        recorder.sweeps += 1;
        recorder.sweptLeases += swept.expired;
      } catch (error) {
        recorder.error(error);
        stopped = true;
      }
    });
  }, intervalMs);
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await current;
    },
  };
}
