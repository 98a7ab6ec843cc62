// The ladder (issue 51): every step of bench/lib/ladder-steps.ts (the lean prototype, then one
// engine property at a time), the Stripe pattern and the engine's cycle, measured in the same
// alternating rounds at each client count, and the prototype's and the engine's batches of 100
// keys beside them. Every run as in `npm run bench`: a fresh clone of the bench template (the
// step's schema `p` loaded into it), CHECKPOINT, an unmeasured warm-up, the measured pgbench run
// between WAL readings, correctness counters. Rounds run the rows in order, then in reverse, so a
// drift of the machine hits the top and the bottom of the ladder alike. Then the server CPU per
// cycle of each step and of the engine: one backend runs the step's script statement by
// statement, each its own transaction as under pgbench, its CPU read from /proc/<pid>/schedstat
// (bench/lib/cpu.ts; rounds alternating, as above). Then, per row, one run at the last client
// count with pg_stat_activity sampled every 10 ms (bench/lib/wait-events.ts).
//
// Prints and writes (bench/out/ladder.md, bench/out/ladder.json) per row: the rate against the
// Stripe pattern at each client count (median of the per-round ratios), against the previous
// step, server CPU per cycle, WAL bytes per operation, and the top wait events. Exit code 1 when
// a run aborts or a correctness check fails; timing never fails the run.
//   npx tsx bench/ladder/run.ts [--clients 8,32] [--rounds 3] [--duration 15] [--warmup 3]
//                               [--steps s0,s5,...] [--no-engine] [--no-batch] [--cpu-cycles 300]
//                               [--waits-seconds 5] [--no-tps]
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { BenchOptions } from '../lib/args.js';
import { BATCH_KEYS, runBatch } from '../lib/batch.js';
import { measureCpuScript } from '../lib/cpu.js';
import { BENCH_DIR, startBenchServer } from '../lib/database.js';
import { LADDER_OUT, writeLadder, type WrittenStep } from '../lib/ladder-files.js';
import { selectSteps } from '../lib/ladder-steps.js';
import {
  renderLadderTable,
  STRIPE_LABEL,
  summarizeLadder,
  type LadderRowSpec,
  type WaitShare,
} from '../lib/ladder-summary.js';
import { locatePgbench, PGBENCH_MISSING_HINT } from '../lib/pgbench.js';
import { prototypeSql, runProtoBatch, runSchemaCycle } from '../lib/prototype.js';
import { runBaseline, runEngineCycle, type ScenarioContext } from '../lib/scenarios.js';
import type { RunResult } from '../lib/types.js';
import { profileWaitEvents } from '../lib/wait-events.js';
import { withPgClient } from '../../src/db/with-pg-client.js';

const USAGE = `Usage: npx tsx bench/ladder/run.ts [options]
  --clients 8,32        client counts (default 8,32)
  --rounds N            alternating rounds per client count (default 3)
  --duration N          seconds per measured run (default 15)
  --warmup N            unmeasured seconds after each run's CHECKPOINT (default 3; 0 = none)
  --steps s0,s1,...     the ladder's steps to run (default all)
  --no-engine           leave out the engine's cycle (bench/scripts/cycle.sql)
  --no-batch            leave out the batches (the prototype's and the engine's, 100 keys)
  --cpu-cycles N        per round, server CPU of N cycles of each step and of the engine, one backend (default 300; 0 = none)
  --no-tps              no pgbench rounds: only the server CPU per cycle (and the wait events)
  --waits-seconds N     per row, one run of N s at the last client count sampling wait events (default 5; 0 = none)
  --threads N           pgbench threads (default: number of CPUs)
  --out DIR             where the steps' SQL and scripts are written (default bench/out/ladder)`;

const positive = (value: string, flag: string, min = 1): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`${flag}: expected a whole number >= ${min}, got ${value}`);
  return n;
};

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '8,32' },
    rounds: { type: 'string', default: '3' },
    duration: { type: 'string', default: '15' },
    warmup: { type: 'string', default: '3' },
    steps: { type: 'string' },
    'no-engine': { type: 'boolean', default: false },
    'no-batch': { type: 'boolean', default: false },
    'cpu-cycles': { type: 'string', default: '300' },
    'no-tps': { type: 'boolean', default: false },
    'waits-seconds': { type: 'string', default: '5' },
    threads: { type: 'string' },
    out: { type: 'string', default: LADDER_OUT },
    help: { type: 'boolean', default: false },
  },
  strict: true,
});
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const clientCounts = values.clients.split(',').map((c) => positive(c.trim(), '--clients'));
const rounds = positive(values.rounds, '--rounds');
const duration = positive(values.duration, '--duration');
const warmup = positive(values.warmup, '--warmup', 0);
const waitsSeconds = positive(values['waits-seconds'], '--waits-seconds', 0);
const cpuCycles = positive(values['cpu-cycles'], '--cpu-cycles', 0);
const threads = values.threads === undefined ? os.cpus().length : positive(values.threads, '--threads');
const steps = selectSteps(values.steps?.split(',').map((s) => s.trim()));

/** One row of the ladder: how to measure it and how to sample its waits. */
interface Row extends LadderRowSpec {
  readonly run: (ctx: ScenarioContext, clients: number, round: number) => Promise<RunResult>;
  readonly waits: { script: string; prepare?: (url: string) => Promise<void>; defines?: Record<string, number> };
  /** Server CPU per cycle: the script (run from Node, bench/lib/script-runner.ts) and the schema to load first. */
  readonly cpu?: { script: string; sql?: string };
}

const loadSchema = (sql: string) => async (url: string) => void (await withPgClient(url, (c) => c.query(sql)));

function ladderRows(written: readonly WrittenStep[], protoSql: string): Row[] {
  const chainTop = [...written].reverse().find((w) => !w.step.side)?.step.id ?? null;
  const rows: Row[] = [
    {
      label: STRIPE_LABEL,
      title: 'the Stripe pattern (bench/scripts/stripe.sql)',
      base: null,
      run: (ctx, c, r) => runBaseline(ctx, 'stripe', c, r),
      waits: { script: 'stripe' },
    },
    ...written.map(
      (w): Row => ({
        label: w.step.id,
        title: w.step.title,
        base: w.step.base !== null && written.some((o) => o.step.id === w.step.base) ? w.step.base : null,
        run: (ctx, c, r) => runSchemaCycle(ctx, { label: w.step.id, sql: w.sql, script: w.scriptFile }, c, r),
        waits: { script: w.scriptFile, prepare: loadSchema(w.sql) },
        cpu: { script: w.scriptFile, sql: w.sql },
      }),
    ),
  ];
  if (!values['no-engine']) {
    rows.push({
      label: 'cycle',
      title: 'the engine (sql/migrations, bench/scripts/cycle.sql)',
      base: chainTop,
      run: (ctx, c, r) => runEngineCycle(ctx, 'cycle', c, r),
      waits: { script: 'cycle' },
      cpu: { script: 'cycle.sql' },
    });
  }
  if (!values['no-batch']) {
    rows.push(
      {
        label: 'proto-batch',
        title: `the prototype's batch, per key (${BATCH_KEYS} keys per call)`,
        base: null,
        run: (ctx, c, r) => runProtoBatch(ctx, c, r),
        waits: { script: 'proto-batch', prepare: loadSchema(protoSql), defines: { batch_keys: BATCH_KEYS } },
      },
      {
        label: 'batch',
        title: `the engine's batch, per key (${BATCH_KEYS} keys per call)`,
        base: 'proto-batch',
        run: (ctx, c, r) => runBatch(ctx, c, r),
        waits: { script: 'batch', defines: { batch_keys: BATCH_KEYS } },
      },
    );
  }
  return rows;
}

async function main(): Promise<number> {
  const log = (msg: string): void => console.log(`[ladder] ${msg}`);
  const pgbench = locatePgbench();
  if (pgbench === undefined) {
    console.error(`[ladder] ${PGBENCH_MISSING_HINT}`);
    return 1;
  }
  const out = path.resolve(values.out);
  const written = await writeLadder(out, steps);
  const rows = ladderRows(written, await prototypeSql());
  log(`${rows.length} rows (steps written to ${out}); provisioning PostgreSQL and the bench template`);
  const server = await startBenchServer(() => {});
  const opts: BenchOptions = {
    quick: false,
    scenarios: [],
    clients: clientCounts,
    length: { kind: 'seconds', seconds: duration },
    scaleRows: [],
    hotkeyClients: 64,
    hotKeys: 4,
    threads,
    repeat: rounds,
    warmup: warmup === 0 ? null : { kind: 'seconds', seconds: warmup },
    verbose: false,
  };
  const ctx: ScenarioContext = { server, pgbench, opts, log: () => {}, progress: log };
  const runs: RunResult[] = [];
  const failures: string[] = [];
  const waits = new Map<string, readonly WaitShare[]>();
  const cpu = new Map<string, (number | undefined)[]>();
  const startedAt = new Date();
  try {
    log(`PostgreSQL ${server.serverVersion}; ${duration} s per run after ${warmup} s of warm-up, ${rounds} rounds`);
    for (const clients of values['no-tps'] ? [] : clientCounts) {
      for (let round = 1; round <= rounds; round++) {
        for (const row of round % 2 === 1 ? rows : [...rows].reverse()) {
          try {
            const run = await row.run(ctx, clients, round);
            runs.push(run);
            const failed = run.checks.filter((c) => !c.ok);
            if (failed.length > 0) failures.push(`${row.label} ${clients} clients round ${round}: checks failed`);
            log(
              `${row.label.padEnd(12)} ${String(clients).padStart(3)} clients  round ${round}  ${run.tps.toFixed(0).padStart(6)} tps  ` +
                `${(run.walBytesPerOp ?? 0).toFixed(0).padStart(5)} WAL B/op  ` +
                (failed.length === 0
                  ? 'checks ok'
                  : `CHECKS FAILED: ${failed.map((c) => `${c.name} (${c.detail})`).join('; ')}`),
            );
          } catch (error) {
            const message = error instanceof Error ? error.message.split('\n')[0] : String(error);
            failures.push(`${row.label} ${clients} clients round ${round}: ${message}`);
            log(`${row.label} ${clients} clients round ${round} FAILED: ${message}`);
          }
        }
      }
    }
    if (cpuCycles > 0) {
      const measured = rows.filter((row) => row.cpu !== undefined);
      for (let round = 1; round <= rounds; round++) {
        for (const row of round % 2 === 1 ? measured : [...measured].reverse()) {
          const db = await server.createRunDatabase(`cpu_${row.label}`);
          try {
            const m = await withPgClient(db.url, async (c) => {
              if (row.cpu?.sql !== undefined) await c.query(row.cpu.sql);
              return measureCpuScript(c, row.cpu?.script ?? '', cpuCycles);
            });
            const list = cpu.get(row.label) ?? [];
            list[round - 1] = m.cpuUsPerOp;
            cpu.set(row.label, list);
            log(`cpu ${row.label.padEnd(12)} round ${round}  ${m.cpuUsPerOp.toFixed(0)} us per cycle (${m.source})`);
          } catch (error) {
            failures.push(
              `${row.label} cpu round ${round}: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`,
            );
          } finally {
            await db.drop();
          }
        }
      }
    }
    const waitClients = clientCounts[clientCounts.length - 1] ?? 32;
    if (waitsSeconds > 0) {
      for (const row of rows) {
        try {
          const profile = await profileWaitEvents(server, pgbench, {
            ...row.waits,
            clients: waitClients,
            seconds: waitsSeconds,
          });
          waits.set(row.label, profile.shares);
          log(
            `waits ${row.label}: ${profile.shares
              .slice(0, 4)
              .map((s) => `${s.wait} ${(s.share * 100).toFixed(0)}%`)
              .join(', ')}`,
          );
        } catch (error) {
          failures.push(`${row.label} waits: ${error instanceof Error ? error.message.split('\n')[0] : String(error)}`);
        }
      }
    }
  } finally {
    await server.stop();
  }
  const summary = summarizeLadder(runs, rows, clientCounts, waits, cpu);
  const stripeTps = clientCounts
    .map((c) => `${summary[0]?.byClients[c]?.tps?.toFixed(0) ?? '-'} at ${c} clients`)
    .join(', ');
  const table = renderLadderTable(summary, clientCounts);
  const load = os
    .loadavg()
    .map((x) => x.toFixed(1))
    .join(' ');
  const markdown = [
    `Ladder: \`npx tsx bench/ladder/run.ts ${process.argv.slice(2).join(' ')}\`, ${startedAt.toISOString()}, ` +
      `PostgreSQL ${server.serverVersion}, ${duration} s runs after ${warmup} s of warm-up, ${rounds} rounds, load ${load} at the end.`,
    `The Stripe pattern, median tps: ${stripeTps}. Batches are per key. Server CPU: ${cpuCycles} cycles per round in one backend, each call its own transaction.`,
    '',
    table,
    ...(failures.length === 0 ? [] : ['', 'Failures:', ...failures.map((f) => `- ${f}`)]),
  ].join('\n');
  await mkdir(path.join(BENCH_DIR, 'out'), { recursive: true });
  await writeFile(path.join(BENCH_DIR, 'out', 'ladder.md'), `${markdown}\n`);
  await writeFile(
    path.join(BENCH_DIR, 'out', 'ladder.json'),
    `${JSON.stringify({ startedAt, options: values, postgres: server.serverVersion, rows: summary, runs, failures }, null, 2)}\n`,
  );
  console.log(`\n${markdown}\n\n[ladder] wrote bench/out/ladder.md and bench/out/ladder.json`);
  return failures.length === 0 ? 0 : 1;
}

process.exitCode = await main();
