// Delegated claim + complete cycle on a Citus coordinator + 2 workers against plain PostgreSQL,
// in the same run on the same machine: `npm run bench:citus [-- --seconds N --rounds N --clients N]`.
// Needs Citus installed (docs/scale-out.md) and pgbench. Prints one line per round and a summary;
// every processed transaction must have produced exactly one settlement (checked after each round).
// `--citus-bin DIR`: run the Citus nodes from another PostgreSQL 15 installation's bin directory
// (a relocated copy of /usr/lib/postgresql/15 whose lib/citus.so is a patched build; see
// docs/scale-out.md, "Where a delegated cycle's CPU goes"). `--warmup W`: measure each round from
// W seconds on (warm connections; see below). `--single-table auto|on|off`: see below.
// `--workers N` (default 2) and `--via coordinator|workers|key`, `--driver pgbench|client`: see below.
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createSettleClient, type SettleClient } from '../src/client/index.js';
import { distribute } from '../src/db/distribute.js';
import { migrate } from '../src/db/migrate.js';
import { withPgClient } from '../src/db/with-pg-client.js';
import { citusUnavailableReason, startCitusCluster } from '../src/dev-server/citus-cluster.js';
import { DEBIAN_PG_BIN_DIR, startLocalCluster } from '../src/dev-server/local-cluster.js';
import { locatePgbench, PGBENCH_MISSING_HINT, runPgbench } from './lib/pgbench.js';

const SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'scripts', 'citus-cycle.sql');
const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '2' },
    clients: { type: 'string', default: '8' },
    'citus-bin': { type: 'string' },
    warmup: { type: 'string', default: '0' },
    'single-table': { type: 'string', default: 'auto' },
    workers: { type: 'string', default: '2' },
    via: { type: 'string', default: 'coordinator' },
    driver: { type: 'string', default: 'pgbench' },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const clients = Number(values.clients);
// --warmup W: each round's pgbench runs W + seconds + 2 s and the round is measured from W s on
// (tps and CPU per cycle from the settlements and the CPU of that window): the connections are
// warm then, as an application's pooled connections are. Without it a round is the whole run
// from fresh connections, and on Citus each new worker connection compiles every trigger
// function once per shard and plans each statement several times before reusing a plan.
const warmup = Number(values.warmup);
// --single-table auto|on|off: distribute's step 12 (the hot path as single-table statements,
// sql/citus/single-table.sql) as its probe decides (auto), or forced, to measure both forms on
// one build.
const singleTable = values['single-table'];
if (singleTable !== 'auto' && singleTable !== 'on' && singleTable !== 'off') {
  console.error('bench:citus: --single-table must be auto, on or off');
  process.exit(2);
}

// --via coordinator|workers: where the application's connections go. `coordinator` (the default):
// every call is delegated from the coordinator to the worker that holds its key. `workers`: the
// clients are spread over the workers' own endpoints (every Citus 13 node holds the metadata), and
// a worker runs a call itself when it holds the key, else delegates it to the one that does; with
// `--workers 1` every call runs where it arrives, as with applications that route each key to the
// node holding it: the cycle without the coordinator's hop (docs/scale-out.md, capacity model).
// `key` (--driver client only): the typed client with citusRouting sends each call to the worker
// that holds its key.
// --driver pgbench|client: pgbench runs bench/scripts/citus-cycle.sql (the default); `client`
// runs the typed client's run() (claim, an empty effect, complete) in `clients` concurrent loops
// in this process, one pool per target, against plain PostgreSQL and Citus alike.
const via = values.via;
const driver = values.driver;
if (
  !['coordinator', 'workers', 'key'].includes(via) ||
  !['pgbench', 'client'].includes(driver) ||
  (via === 'key' && driver !== 'client') ||
  (via === 'workers' && driver !== 'pgbench')
) {
  console.error(
    'bench:citus: --driver pgbench|client; --via coordinator|workers with pgbench, coordinator|key with client',
  );
  process.exit(2);
}
const workerCount = Number(values.workers);
if (!Number.isInteger(workerCount) || workerCount < 1 || (via === 'workers' && clients < workerCount)) {
  console.error('bench:citus: --workers must be a positive integer (and with --via workers at most --clients)');
  process.exit(2);
}

const unavailable = values['citus-bin'] === undefined ? citusUnavailableReason() : undefined;
if (unavailable !== undefined) {
  console.error(`bench:citus: ${unavailable}`);
  process.exit(2);
}
const pgbench = locatePgbench();
if (pgbench === undefined) {
  console.error(`bench:citus: ${PGBENCH_MISSING_HINT}`);
  process.exit(2);
}

const log = (msg: string): void => console.error(`[bench:citus] ${msg}`);
const [citus, plain] = await Promise.all([
  startCitusCluster({ log: () => {}, binDir: values['citus-bin'], workers: workerCount }),
  startLocalCluster({ binDir: DEBIAN_PG_BIN_DIR, libDirs: ['/usr/lib/postgresql/15/lib'], log: () => {} }),
]);
try {
  await migrate(citus.coordinator.adminUrl);
  const summary = await distribute(citus.coordinator.adminUrl, { singleTableStatements: singleTable });
  await migrate(plain.adminUrl);
  log(
    `Citus: ${JSON.stringify(summary)} (${values['citus-bin'] ?? 'the installed Citus'}); plain PostgreSQL 15 on the same machine`,
  );
  // Proof of delegation: the workers' pg_stat_statements count the claims they ran themselves.
  await withPgClient(citus.coordinator.adminUrl, (c) => c.query('create extension if not exists pg_stat_statements')); // propagated to the workers
  const workerClaims = async (): Promise<number> => {
    let total = 0;
    for (const w of citus.workers) {
      total += await withPgClient(w.adminUrl, async (c) =>
        Number(
          (
            await c.query<{ n: string }>(
              `select coalesce(sum(calls), 0) as n from pg_stat_statements where query ~* 'FROM settle\\._?claim\\('`,
            )
          ).rows[0]?.n,
        ),
      );
    }
    return total;
  };
  // The application's login (a delegated call runs on the worker as the caller).
  const appUrl = async (adminUrl: string): Promise<string> => {
    await withPgClient(adminUrl, (c) =>
      c.query(
        `do $$ begin if not exists (select 1 from pg_roles where rolname = 'bench_app') then create role bench_app login in role settle_app; end if; end $$`,
      ),
    );
    return asAppUrl(adminUrl);
  };
  const asAppUrl = (adminUrl: string): string => {
    const u = new URL(adminUrl);
    u.username = 'bench_app';
    return u.toString();
  };
  // Each target: where its pgbench clients connect (with --via workers, one pgbench per worker,
  // the clients split between them).
  const citusEntries = via === 'workers' ? citus.workers : [citus.coordinator];
  // --driver client: one typed client per target, created once (warm pools, as an application's).
  const routes = Object.fromEntries(citus.workers.map((w) => [`127.0.0.1:${w.port}`, asAppUrl(w.adminUrl)]));
  const plainClient = createSettleClient({ connectionString: asAppUrl(plain.adminUrl), poolSize: clients });
  const citusClient = createSettleClient({
    connectionString: asAppUrl(citus.coordinator.adminUrl),
    poolSize: clients,
    ...(via === 'key'
      ? { citusRouting: { nodes: routes, onError: (e: Error) => log(`citusRouting: ${e.message}`) } }
      : {}),
  });
  const targets = [
    { name: 'plain', admin: plain.adminUrl, urls: [await appUrl(plain.adminUrl)] },
    // The role is created once, on the coordinator (Citus propagates it to every worker; creating
    // it from several nodes at once deadlocks).
    {
      name: 'citus',
      admin: citus.coordinator.adminUrl,
      urls: await appUrl(citus.coordinator.adminUrl).then(() => citusEntries.map((n) => asAppUrl(n.adminUrl))),
    },
  ];
  // CPU seconds a server spent: its postmaster, the backends alive now, and (cutime/cstime) the
  // backends that exited. Sampled around each round: CPU per cycle on each node.
  const nodeDirs: Record<string, string> = { plain: plain.dataDir, coordinator: citus.coordinator.dataDir };
  citus.workers.forEach((w, i) => (nodeDirs[`worker${i + 1}`] = w.dataDir));
  const cpu: Record<string, number[]> = {};
  const results: Record<string, number[]> = { plain: [], citus: [] };
  const latency: Record<string, number[]> = { plain: [], citus: [] };
  for (let round = 1; round <= rounds; round++) {
    for (const t of targets) {
      const before = await settlements(t.admin);
      const claimsBefore = t.name === 'citus' ? await workerClaims() : 0;
      const nodes = t.name === 'plain' ? ['plain'] : Object.keys(nodeDirs).filter((n) => n !== 'plain');
      let cpuBefore = await Promise.all(nodes.map((n) => serverCpuSeconds(nodeDirs[n] as string)));
      const durationS = warmup > 0 ? warmup + seconds + 2 : seconds;
      const running =
        driver === 'pgbench'
          ? runSplit(t.urls, durationS)
          : runClient(t.name === 'plain' ? plainClient : citusClient, durationS);
      let windowBefore = before;
      let cpuAfter: number[] = [];
      let windowCycles = 0;
      if (warmup > 0) {
        await sleep(warmup * 1000);
        windowBefore = await settlements(t.admin);
        cpuBefore = await Promise.all(nodes.map((n) => serverCpuSeconds(nodeDirs[n] as string)));
        await sleep(seconds * 1000);
        windowCycles = (await settlements(t.admin)) - windowBefore;
        cpuAfter = await Promise.all(nodes.map((n) => serverCpuSeconds(nodeDirs[n] as string)));
      }
      const run = await running;
      const made = (await settlements(t.admin)) - before;
      if (made !== run.output.processed) {
        throw new Error(`${t.name}: ${run.output.processed} transactions but ${made} new settlements`);
      }
      if (t.name === 'citus') {
        const delegated = (await workerClaims()) - claimsBefore;
        if (delegated < run.output.processed)
          throw new Error(`citus: ${run.output.processed} cycles but only ${delegated} claims ran on the workers`);
      }
      if (warmup === 0) {
        cpuAfter = await Promise.all(nodes.map((n) => serverCpuSeconds(nodeDirs[n] as string)));
        windowCycles = run.output.processed;
      }
      const tps = warmup > 0 ? windowCycles / seconds : (run.output.tps ?? 0);
      const perCycle = nodes.map(
        (n, i) => `${n} ${((((cpuAfter[i] ?? 0) - (cpuBefore[i] ?? 0)) / windowCycles) * 1e6).toFixed(0)} us`,
      );
      nodes.forEach((n, i) => (cpu[n] ??= []).push(((cpuAfter[i] ?? 0) - (cpuBefore[i] ?? 0)) / windowCycles));
      results[t.name]?.push(tps);
      latency[t.name]?.push(run.output.latencyAverageMs ?? 0);
      console.log(
        `round ${round} ${t.name.padEnd(5)} tps ${tps.toFixed(1).padStart(7)}  latency ${(run.output.latencyAverageMs ?? 0).toFixed(2)} ms  (${run.output.processed} cycles, ${made} settlements); server CPU per cycle: ${perCycle.join(', ')}`,
      );
    }
  }
  const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const p = mean(results.plain ?? []);
  const c = mean(results.citus ?? []);
  const entry = {
    coordinator: 'clients connected to the coordinator',
    workers: 'clients spread over the workers',
    key: "each call sent to its key's worker (citusRouting)",
  }[via];
  console.log(
    `\nsummary (${clients} clients, ${driver === 'pgbench' ? 'pgbench -M prepared' : "the typed client's run()"}, ${seconds} s x ${rounds} rounds each${warmup > 0 ? `, measured after ${warmup} s of warm-up` : ''}; Citus: coordinator + ${workerCount} worker${workerCount > 1 ? 's' : ''}, ${entry}):`,
  );
  console.log(
    `  ${'plain PostgreSQL'.padEnd(25)}${p.toFixed(1)} cycles/s  (${results.plain?.map((x) => x.toFixed(0)).join(', ')})`,
  );
  console.log(
    `  ${`Citus (via ${via})`.padEnd(25)}${c.toFixed(1)} cycles/s  (${results.citus?.map((x) => x.toFixed(0)).join(', ')})`,
  );
  console.log(`  ${'citus / plain'.padEnd(25)}${(c / p).toFixed(2)}x`);
  console.log(
    '  server CPU per cycle (mean of rounds): ' +
      Object.entries(cpu)
        .map(([n, xs]) => `${n} ${(mean(xs) * 1e6).toFixed(0)} us`)
        .join(', '),
  );
  await Promise.all([plainClient.end(), citusClient.end()]);
} finally {
  await Promise.all([citus.stop(), plain.stop()]);
}

/**
 * pgbench against each URL at once, the clients split between them (as evenly as they divide), as
 * one run: transactions summed, latency weighted by them, tps summed.
 */
async function runSplit(
  urls: readonly string[],
  durationS: number,
): Promise<{ output: { processed: number; tps: number | null; latencyAverageMs: number | null } }> {
  const runs = await Promise.all(
    urls.map((url, i) => {
      const share = Math.floor(clients / urls.length) + (i < clients % urls.length ? 1 : 0);
      return runPgbench({
        pgbench: pgbench as string,
        url,
        script: SCRIPT,
        clients: share,
        threads: urls.length === 1 ? 2 : 1,
        durationS,
        protocol: 'prepared',
      });
    }),
  );
  const processed = runs.reduce((a, r) => a + r.output.processed, 0);
  return {
    output: {
      processed,
      tps: runs.reduce((a, r) => a + (r.output.tps ?? 0), 0),
      latencyAverageMs:
        runs.reduce((a, r) => a + (r.output.latencyAverageMs ?? 0) * r.output.processed, 0) / Math.max(1, processed),
    },
  };
}

/** `clients` loops of run() (claim, an empty effect, complete) on new keys for durationS. */
async function runClient(
  client: SettleClient,
  durationS: number,
): Promise<{ output: { processed: number; tps: number | null; latencyAverageMs: number | null } }> {
  const until = performance.now() + durationS * 1000;
  let processed = 0;
  let busyMs = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: clients }, async (_, loop) => {
      for (let i = 0; performance.now() < until; i++) {
        const key = `op-${process.pid}-${loop}-${i}-${Math.random().toString(36).slice(2)}`;
        const t0 = performance.now();
        const outcome = await client.run(
          {
            tenant: 'bench-citus',
            key,
            request: { amount: i % 10000, currency: 'EUR' },
            binding: { principal: 'bench-app', scopes: ['payments.write'], generation: 0 },
          },
          async () => ({ charge: key }),
        );
        if (outcome.outcome !== 'completed') throw new Error(`run() answered ${outcome.outcome} for a new key`);
        busyMs += performance.now() - t0;
        processed++;
      }
    }),
  );
  const elapsedS = (performance.now() - started) / 1000;
  return { output: { processed, tps: processed / elapsedS, latencyAverageMs: busyMs / Math.max(1, processed) } };
}

async function serverCpuSeconds(dataDir: string): Promise<number> {
  const ticks = 100; // USER_HZ on Linux
  const pid = Number((await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  const statOf = async (p: number): Promise<number[] | undefined> => {
    const text = await readFile(`/proc/${p}/stat`, 'utf8').catch(() => undefined);
    if (text === undefined) return undefined;
    return text
      .slice(text.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number); // fields from 3 (state) on
  };
  // utime 14, stime 15, cutime 16, cstime 17 (1-based) -> indexes 11..14 here. A backend that
  // exits while /proc is scanned would be in neither its own entry nor the postmaster's cutime
  // (pgbench's backends end at the end of a round: seconds of CPU lost, a negative figure): the
  // scan is repeated until the postmaster reaped nothing during it.
  for (let attempt = 0; ; attempt++) {
    const own = await statOf(pid);
    if (own === undefined) return 0;
    let total = (own[11] ?? 0) + (own[12] ?? 0) + (own[13] ?? 0) + (own[14] ?? 0);
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const st = await statOf(Number(entry));
      if (st !== undefined && st[1] === pid) total += (st[11] ?? 0) + (st[12] ?? 0);
    }
    const again = await statOf(pid);
    if (again === undefined) return total / ticks;
    if ((again[13] ?? 0) + (again[14] ?? 0) === (own[13] ?? 0) + (own[14] ?? 0) || attempt >= 20) return total / ticks;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function settlements(url: string): Promise<number> {
  return withPgClient(url, async (c) =>
    Number(
      (await c.query<{ n: string }>(`select count(*) as n from settle.settlements where tenant = 'bench-citus'`))
        .rows[0]?.n,
    ),
  );
}
