import { performance } from 'node:perf_hooks';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import { createPool, sql } from 'slonik';
import { settleTypeParsers } from '../src/client/interceptors.js';
import { runClientCycle } from './lib/client-cycle.js';
import { checkpoint, startBenchServer, type BenchServer } from './lib/database.js';
import { scriptPath } from './lib/measure.js';
import { locatePgbench, runPgbench } from './lib/pgbench.js';
import { option } from './lib/script-options.js';

/**
 * The bench's `client` target in isolation: the fresh-key cycle (claim, no-op effect, complete)
 * driven several ways against the same throwaway server, each run in a fresh database after a
 * CHECKPOINT and an unmeasured warm-up of the same driver (full-page images after the
 * checkpoint; Node's JIT), rounds interleaved so the machine's noise hits every driver alike:
 *
 * - `pgbench`: bench/scripts/cycle.sql (`-M prepared`), the reference of the target;
 * - `pg`: plain node-pg, one connection per worker, named prepared statements of the client's
 *   own texts (`select *`: every column the client reads and checks): the floor of any Node
 *   driver of the cycle;
 * - `slonik`: the same statements through a bare slonik pool (the client's type parsers, no
 *   interceptors, no row validation): what slonik's query pipeline adds to node-pg;
 * - `client`: createSettleClient().run(), exactly the bench's `client` scenario;
 * - `unprepared`: the same with `preparedStatements: false` (what the prepared statements buy);
 * - `baseline`: run() of another build of the client (`--baseline <path to its src/client/index.ts>`,
 *   e.g. a `git worktree add` of an earlier commit): before/after in one run.
 *
 *   npx tsx bench/client-ratio.ts [--clients 8] [--duration 5] [--warmup 1] [--rounds 2] [--only client,pg] [--baseline <path>] [--threads 1]
 *
 * `--threads N` runs the client drivers (client, unprepared, baseline) on N event loops (worker
 * threads, bench/lib/client-cycle.ts), as pgbench runs on `-j 2` threads; `pg` and `slonik` stay on
 * this one.
 *
 * Prints cycles/s per run (for the drivers in this process also the CPU, user + system, the
 * process spent per cycle: the client's own cost, which it takes from the server on a small
 * machine), the median and minimum of each driver's CPU per cycle, and, per round and as the
 * median of the rounds, the ratios client/pgbench (the target: >= 0.8), client/pg and the others.
 */
type Driver = 'pgbench' | 'pg' | 'slonik' | 'client' | 'unprepared' | 'baseline';
const CLIENT_DRIVERS: ReadonlySet<Driver> = new Set(['client', 'unprepared', 'baseline']);

// The client's own statements (src/client/queries.ts), with the script's constant arguments.
const CLAIM = {
  name: 'ratio_claim',
  text: `select * from settle.claim(tenant => 'bench', key => $1, request => $2::jsonb, principal => 'bench-app',
                                 scopes => array['payments.write'], binding_generation => 0,
                                 lease => interval '30 seconds', worker => 'node')`,
};
const COMPLETE = {
  name: 'ratio_complete',
  text: `select * from settle.complete(tenant => 'bench', key => $1, attempt => $2, lease_token => $3,
                                    fingerprint => $4, principal => 'bench-app', scopes => array['payments.write'],
                                    binding_generation => 0, result => $5::jsonb)`,
};

type Row = Record<string, unknown> | undefined;
type Send = (statement: { name: string; text: string }, values: unknown[]) => Promise<Row>;

/** One worker's loop of the cycle on `send` until the deadline; returns the cycles it completed. */
async function cycleLoop(send: Send, worker: number, deadline: number): Promise<number> {
  let processed = 0;
  while (performance.now() < deadline) {
    const k = 100_000_000_000 + Math.floor(Math.random() * 899_999_999_999);
    const key = `op-${k}-n${worker}`;
    const claim = await send(CLAIM, [key, JSON.stringify({ amount: k % 10000, currency: 'EUR' })]);
    if (claim?.outcome !== 'acquired') throw new Error(`cycle: claim of ${key} answered ${String(claim?.outcome)}`);
    const values = [key, claim.attempt, claim.lease_token, claim.fingerprint, JSON.stringify({ charge: `ch-${k}` })];
    const done = await send(COMPLETE, values);
    if (done?.outcome !== 'settled') throw new Error(`cycle: complete of ${key} answered ${String(done?.outcome)}`);
    processed += 1;
  }
  return processed;
}

/** A bare slonik pool: the same statements as named prepared statements, no interceptors. */
async function runSlonikCycle(url: string, clients: number, durationS: number): Promise<number> {
  const pool = await createPool(url, {
    maxPoolSize: clients,
    typeParsers: settleTypeParsers(),
    resetConnection: async () => {},
    queryRetryLimit: 0,
  });
  try {
    await Promise.all(Array.from({ length: clients }, () => pool.query(sql.unsafe`select 1`)));
    const started = performance.now();
    const send: Send = async (statement, values) => {
      const token = { ...sql.unsafe``, sql: statement.text, name: statement.name, values } as unknown as Parameters<
        typeof pool.query
      >[0];
      return (await pool.query(token)).rows[0] as Row;
    };
    const counts = await Promise.all(
      Array.from({ length: clients }, (_, worker) => cycleLoop(send, worker, started + durationS * 1000)),
    );
    return counts.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
  } finally {
    await pool.end();
  }
}

/** Plain node-pg: the same cycle, keys and concurrency, one connection per worker. */
async function runPgCycle(url: string, clients: number, durationS: number): Promise<number> {
  const connections = await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      return client;
    }),
  );
  try {
    const started = performance.now();
    const counts = await Promise.all(
      connections.map((client, worker) =>
        cycleLoop(
          async (statement, values) => (await client.query({ ...statement, values })).rows[0] as Row,
          worker,
          started + durationS * 1000,
        ),
      ),
    );
    return counts.reduce((a, b) => a + b, 0) / ((performance.now() - started) / 1000);
  } finally {
    await Promise.all(connections.map((client) => client.end()));
  }
}

interface Measured {
  readonly tps: number;
  /** CPU (user + system) this Node process spent per cycle; null for pgbench (another process). */
  readonly nodeCpuUsPerCycle: number | null;
}

async function measure(
  server: BenchServer,
  driver: Driver,
  clients: number,
  durationS: number,
  warmupS: number,
): Promise<Measured> {
  const db = await server.createRunDatabase(`ratio_${driver}_${clients}`);
  try {
    await checkpoint(db.url);
    // The client drivers warm up in the threads and pool they measure with (inside drive()).
    if (warmupS > 0 && !CLIENT_DRIVERS.has(driver)) await drive(db.url, driver, clients, warmupS, 0);
    const before = process.cpuUsage();
    const started = performance.now();
    const { tps, cpuPerCycle } = await drive(db.url, driver, clients, durationS, warmupS);
    const cpu = process.cpuUsage(before);
    const cycles = tps * ((performance.now() - started) / 1000);
    // The client drivers count their own timed window (their worker threads start outside it).
    if (cpuPerCycle !== null || driver === 'pgbench' || cycles === 0) return { tps, nodeCpuUsPerCycle: cpuPerCycle };
    return { tps, nodeCpuUsPerCycle: (cpu.user + cpu.system) / cycles };
  } finally {
    await db.drop();
  }
}

/** Cycles per second of one timed run of `driver`, and the Node CPU per cycle of its timed window if it counts it. */
async function drive(
  url: string,
  driver: Driver,
  clients: number,
  durationS: number,
  warmupS: number,
): Promise<{ tps: number; cpuPerCycle: number | null }> {
  const length = { kind: 'seconds', seconds: durationS } as const;
  const bare = (tps: number) => ({ tps, cpuPerCycle: null });
  const viaClient = async (options: Parameters<typeof runClientCycle>[3]) => {
    const warmup = warmupS > 0 ? { warmup: { kind: 'seconds', seconds: warmupS } as const } : {};
    const result = await runClientCycle(url, clients, length, { threads, ...warmup, ...options });
    return { tps: result.tps, cpuPerCycle: result.nodeCpuUs / Math.max(1, result.processed) };
  };
  switch (driver) {
    case 'pgbench': {
      const pgbench = locatePgbench();
      if (pgbench === undefined) throw new Error('pgbench not found (see bench/README.md)');
      const run = await runPgbench({
        pgbench,
        url,
        script: scriptPath('cycle.sql'),
        clients,
        threads: 2,
        durationS,
        protocol: 'prepared',
        maxTries: 3,
      });
      return bare(run.output.tps ?? 0);
    }
    case 'pg':
      return bare(await runPgCycle(url, clients, durationS));
    case 'slonik':
      return bare(await runSlonikCycle(url, clients, durationS));
    case 'client':
      return viaClient({});
    case 'baseline': {
      if (baseline === undefined) throw new Error('--only baseline needs --baseline <path to src/client/index.ts>');
      return viaClient({ clientModule: pathToFileURL(path.resolve(baseline)).href });
    }
    case 'unprepared':
      return viaClient({ preparedStatements: false });
  }
}

const clients = Number(option('clients', '8'));
const durationS = Number(option('duration', '5'));
const warmupS = Number(option('warmup', '1'));
const rounds = Number(option('rounds', '2'));
const baseline = process.argv.includes('--baseline') ? option('baseline', '') : undefined;
const threads = Number(option('threads', '1'));
const drivers = option('only', `pgbench,pg,slonik,client${baseline === undefined ? '' : ',baseline'}`).split(
  ',',
) as Driver[];

const server = await startBenchServer(() => {});
const tps: Record<string, number[]> = {};
const cpuPerCycle: Record<string, number[]> = {};
try {
  for (let round = 1; round <= rounds; round += 1) {
    for (const driver of drivers) {
      const { tps: value, nodeCpuUsPerCycle } = await measure(server, driver, clients, durationS, warmupS);
      (tps[driver] ??= []).push(value);
      if (nodeCpuUsPerCycle !== null) (cpuPerCycle[driver] ??= []).push(nodeCpuUsPerCycle);
      const cpu = nodeCpuUsPerCycle === null ? '' : `, Node CPU ${nodeCpuUsPerCycle.toFixed(0)} us/cycle`;
      console.log(
        `round ${round} ${driver.padEnd(10)} ${clients} workers ${durationS}s: ${value.toFixed(0)} cycles/s${cpu}`,
      );
    }
  }
} finally {
  await server.stop();
}
// Each round's ratio divides two runs minutes apart at most; the median of the rounds resists
// the machine's noise better than a ratio of means.
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[middle] ?? 0) : ((sorted[middle - 1] ?? 0) + (sorted[middle] ?? 0)) / 2;
};
const ratio = (a: Driver, b: Driver): string => {
  const x = tps[a];
  const y = tps[b];
  if (x === undefined || y === undefined) return '-';
  const perRound = x.map((value, round) => value / (y[round] ?? Number.NaN));
  return `median ${median(perRound).toFixed(2)}x (rounds ${perRound.map((r) => r.toFixed(2)).join(', ')})`;
};
for (const [driver, values] of Object.entries(cpuPerCycle)) {
  console.log(
    `${driver.padEnd(10)} Node CPU per cycle: median ${median(values).toFixed(0)} us, min ${Math.min(...values).toFixed(0)} us`,
  );
}
for (const [a, b] of [
  ['client', 'pgbench'],
  ['client', 'pg'],
  ['pg', 'pgbench'],
  ['slonik', 'pg'],
  ['client', 'slonik'],
  ['baseline', 'pgbench'],
  ['client', 'baseline'],
  ['client', 'unprepared'],
] as const) {
  if (drivers.includes(a) && drivers.includes(b)) console.log(`${`${a}/${b}:`.padEnd(20)} ${ratio(a, b)}`);
}
