import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describeLength, parseBenchArgs, USAGE, type BenchOptions } from './lib/args.js';
import { BENCH_DIR, startBenchServer } from './lib/database.js';
import { locatePgbench, PGBENCH_MISSING_HINT } from './lib/pgbench.js';
import { renderMarkdown, renderTerminal } from './lib/report.js';
import { runBatch, runFeedLag } from './lib/batch.js';
import { runHttp } from './lib/http-scenario.js';
import { runProtoBatch, runProtoCycle } from './lib/prototype.js';
import {
  runBaseline,
  runClient,
  runCpu,
  runEngineCycle,
  runHotkey,
  runPkread,
  runReplay,
  runScale,
  type ScenarioContext,
} from './lib/scenarios.js';
import { renderReportSvg } from './lib/svg.js';
import { evaluateReferenceRatios, evaluateTargets } from './lib/targets.js';
import type { BenchReport, RunResult, ScenarioName } from './lib/types.js';

/**
 * `npm run bench [-- --quick]`: every scenario against a freshly provisioned
 * PostgreSQL, baselines in the same run, correctness counters after every run. Exit code 1
 * when a run aborts or a correctness check fails; timing never fails the run.
 */

const PGBENCH_SCENARIOS: ReadonlySet<ScenarioName> = new Set([
  'floor2',
  'spec4',
  'cycle',
  'proto',
  'stripe',
  'batch',
  'proto-batch',
  'local',
  'lww',
  'replay',
  'pkread',
  'hotkey',
  'feedlag',
  'scale',
]);

/**
 * Per client count, neighbours are compared: floor2|spec4|cycle (spec4 sits between both sides
 * of its ratios; without it floor2|cycle), cycle|client, proto|stripe|batch|proto-batch (the
 * prototype's cycle and batch beside the Stripe pattern and the engine's batch), local|lww,
 * replay|pkread; http runs its two apps one after the other itself.
 */
const PAIRED_ORDER: readonly ScenarioName[] = [
  'floor2',
  'spec4',
  'cycle',
  'client',
  'proto',
  'stripe',
  'batch',
  'proto-batch',
  'local',
  'lww',
  'replay',
  'pkread',
  'http',
];
/** In quick mode only these run at the second and later client counts. */
const QUICK_WIDE: ReadonlySet<ScenarioName> = new Set(['floor2', 'cycle', 'proto', 'stripe', 'batch', 'proto-batch']);

async function main(): Promise<number> {
  const parsed = parseBenchArgs(process.argv.slice(2), os.cpus().length);
  if (parsed === 'help') {
    console.log(USAGE);
    return 0;
  }
  const opts = parsed;
  const startedAt = new Date();
  const log = (msg: string): void => console.log(`[bench] ${msg}`);
  const quiet = (msg: string): void => {
    if (opts.verbose) log(msg);
  };
  const notes: string[] = [];

  const pgbench = locatePgbench();
  if (pgbench === undefined) {
    console.warn(`[bench] ${PGBENCH_MISSING_HINT}`);
    notes.push(PGBENCH_MISSING_HINT);
  }
  const wanted = opts.scenarios.filter((s) => pgbench !== undefined || !PGBENCH_SCENARIOS.has(s));

  log('provisioning PostgreSQL (DATABASE_URL, else a throwaway local cluster) and the bench template');
  const server = await startBenchServer(quiet);
  const runs: RunResult[] = [];
  let exitCode = 0;
  try {
    const ctx: ScenarioContext = { server, pgbench, opts, log: quiet, progress: log };
    log(
      `PostgreSQL ${server.serverVersion} (${server.provisioned.kind}); ${pgbench ?? 'no pgbench'}; ` +
        `${describeLength(opts.length)} per run after ${opts.warmup === null ? 'no' : describeLength(opts.warmup)} warm-up, ${opts.repeat} round${opts.repeat === 1 ? '' : 's'}`,
    );
    const record = (run: RunResult): void => {
      runs.push(run);
      const failed = run.checks.filter((c) => !c.ok);
      log(
        `${run.label.padEnd(16)} ${String(run.clients).padStart(3)} clients  round ${run.round}  ${run.tps.toFixed(0).padStart(6)} tps  ` +
          `${(run.walBytesPerOp ?? 0).toFixed(0).padStart(5)} WAL B/op  ` +
          `${failed.length === 0 ? 'checks ok' : `CHECKS FAILED: ${failed.map((c) => `${c.name} (${c.detail})`).join('; ')}`}`,
      );
    };
    // scale first: its row generation is the long step; a too-slow machine shows it early.
    if (wanted.includes('scale')) {
      await runScale(ctx, opts.quick ? opts.clients.slice(0, 1) : opts.clients, record);
    }
    // Per client count, round after round, every scenario once: a scenario and its baselines
    // alternate (A B A B ...), so slow phases of the shared machine hit both sides of a ratio.
    for (const [index, clients] of opts.clients.entries()) {
      for (let round = 1; round <= opts.repeat; round++) {
        for (const scenario of PAIRED_ORDER) {
          if (!wanted.includes(scenario) || (opts.quick && index > 0 && !QUICK_WIDE.has(scenario))) continue;
          for (const run of [await runScenario(ctx, scenario, clients, round)].flat()) record(run);
        }
      }
    }
    if (wanted.includes('hotkey')) {
      for (let round = 1; round <= opts.repeat; round++) {
        record(await runHotkey(ctx, round));
        // The same concurrency on a primary-key read: the p99 the machine gives any statement.
        record(await runPkread(ctx, opts.hotkeyClients, round, true));
      }
    }
    // The feed's lag while FEED_RATE settlements per second are committed by the first client count.
    if (wanted.includes('feedlag')) {
      for (let round = 1; round <= opts.repeat; round++) record(await runFeedLag(ctx, opts.clients[0] ?? 8, round));
    }
    // Server CPU per cycle, one backend: the plain-SQL rows, then the engine; in one DO block
    // without commits (the target), then statement by statement as pgbench sends them.
    if (wanted.includes('cpu')) {
      for (let round = 1; round <= opts.repeat; round++) {
        for (const kind of ['loop', 'call'] as const) {
          record(await runCpu(ctx, 'spec4', kind, round));
          record(await runCpu(ctx, 'cycle', kind, round));
        }
      }
    }
  } catch (error) {
    console.error(`[bench] FAILED: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    notes.push(`run failed: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
    exitCode = 1;
  } finally {
    await server.stop();
  }

  if (runs.some((r) => r.checks.some((c) => !c.ok))) exitCode = 1;
  const report: BenchReport = {
    startedAt: startedAt.toISOString(),
    finishedAt: new Date().toISOString(),
    quick: opts.quick,
    machine: {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      os: `${os.type()} ${os.release()} ${os.arch()}`,
      node: process.version,
      postgres: server.serverVersion,
      pgbench: pgbench ?? null,
      provision: server.provisioned.kind,
      settings: server.settings,
    },
    options: optionsForReport(opts),
    runs,
    targets: evaluateTargets(runs, opts.clients),
    references: evaluateReferenceRatios(runs, opts.clients),
    notes: [...notes, ...clientNotes(runs)],
  };
  await writeOutputs(report);
  console.log(`\n${renderTerminal(report)}`);
  console.log(
    `\n[bench] wrote bench/out/latest.json, bench/out/results.md, bench/out/throughput.svg${exitCode === 0 ? '' : ' (with FAILURES)'}`,
  );
  return exitCode;
}

function runScenario(
  ctx: ScenarioContext,
  scenario: ScenarioName,
  clients: number,
  round: number,
): Promise<RunResult | RunResult[]> {
  switch (scenario) {
    case 'floor2':
    case 'spec4':
    case 'lww':
    case 'stripe':
      return runBaseline(ctx, scenario, clients, round);
    case 'cycle':
    case 'local':
      return runEngineCycle(ctx, scenario, clients, round);
    case 'client':
      return runClient(ctx, clients, round);
    case 'batch':
      return runBatch(ctx, clients, round);
    case 'proto':
      return runProtoCycle(ctx, clients, round);
    case 'proto-batch':
      return runProtoBatch(ctx, clients, round);
    case 'replay':
      return runReplay(ctx, clients, round);
    case 'pkread':
      return runPkread(ctx, clients, round);
    case 'http':
      return runHttp(ctx, clients, round);
    case 'hotkey':
    case 'feedlag':
    case 'scale':
    case 'cpu':
      throw new Error(`${scenario} does not run per client count`);
  }
}

function clientNotes(runs: readonly RunResult[]): string[] {
  return [
    ...(runs.some((r) => r.scenario === 'client')
      ? [
          'client: createSettleClient().run() from one Node process (same CPUs as the server and pgbench), pool size = clients.',
        ]
      : []),
    ...(runs.some((r) => r.scenario === 'http')
      ? [
          'http: the Express example app with the Idempotency-Key middleware against the same app doing the Stripe pattern by hand (node-postgres), one database, served and driven (fetch over loopback) by the bench process; pools of `clients` connections; tps = requests per second.',
        ]
      : []),
  ];
}

function optionsForReport(opts: BenchOptions): Record<string, unknown> {
  return {
    quick: opts.quick,
    scenarios: opts.scenarios,
    clients: opts.clients,
    length: describeLength(opts.length),
    scaleRows: opts.scaleRows,
    hotkeyClients: opts.hotkeyClients,
    hotKeys: opts.hotKeys,
    threads: opts.threads,
    repeat: opts.repeat,
    warmup: opts.warmup === null ? null : describeLength(opts.warmup),
  };
}

/**
 * Every run writes bench/out/ (not tracked): latest.json, results.md and throughput.svg. The
 * published figures are docs/performance-results.md, written from a run's latest.json by
 * `npm run bench:publish` (bench/publish.ts).
 */
async function writeOutputs(report: BenchReport): Promise<void> {
  const outDir = path.join(BENCH_DIR, 'out');
  await mkdir(outDir, { recursive: true });
  await writeFile(path.join(outDir, 'latest.json'), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(path.join(outDir, 'results.md'), renderMarkdown(report));
  await writeFile(path.join(outDir, 'throughput.svg'), renderReportSvg(report));
}

process.exitCode = await main();
