import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { sql } from 'slonik';
import type { createSettleClient as CreateSettleClient, SettleClient } from '../../src/client/index.js';
import { startBenchServer } from '../lib/database.js';
import { baselineRoot, option, REPO_ROOT } from '../lib/script-options.js';

/**
 * Node CPU per run() cycle of two builds of the client against one real database, interleaved
 * in short chunks so that the machine's noise (a shared, loaded 2-vCPU box) hits both alike:
 * the same-run A/B of a client lever, end to end (slonik, node-pg and the socket included).
 *
 *   npx tsx bench/ab/client.ts --baseline <checkout root> [--workers 8] [--chunk 200] [--rounds 9]
 *
 * `<checkout root>` holds the other build's src/ (e.g. `git archive <commit> src | tar -x -C
 * bench/out/base`; inside this repository so it resolves the same node_modules). Each round runs
 * `chunk` cycles per build (`workers` concurrent run() loops over one client of `workers`
 * connections, fresh keys, no-op effect: the bench's `client` scenario), alternating which build
 * goes first; the first round warms up and is not counted. Prints each build's process CPU
 * (user + system) per cycle, median and minimum of the rounds, and the median of the per-round
 * ratios this / baseline. Without `--baseline` it measures this build only.
 */
const workers = Number(option('workers', '8'));
const chunk = Number(option('chunk', '200'));
const rounds = Number(option('rounds', '9'));
const baseline = baselineRoot();
const here = REPO_ROOT;

const load = async (root: string): Promise<typeof CreateSettleClient> =>
  (
    (await import(pathToFileURL(path.join(root, 'src/client/index.ts')).href)) as {
      createSettleClient: typeof CreateSettleClient;
    }
  ).createSettleClient;

async function cycles(client: SettleClient, count: number): Promise<void> {
  let left = count;
  await Promise.all(
    Array.from({ length: workers }, async (_, worker) => {
      while (left > 0) {
        left -= 1;
        const k = 100_000_000_000 + Math.floor(Math.random() * 899_999_999_999);
        const outcome = await client.run(
          {
            tenant: 'bench',
            key: `op-${k}-n${worker}`,
            request: { amount: k % 10000, currency: 'EUR' },
            binding: { principal: 'bench-app', scopes: ['payments.write'], generation: 0 },
            leaseMs: 30_000,
            worker: 'node',
          },
          async () => ({ charge: `ch-${k}` }),
        );
        if (outcome.outcome !== 'completed') throw new Error(`run() answered ${outcome.outcome}`);
      }
    }),
  );
}

const server = await startBenchServer(() => {});
const db = await server.createRunDatabase('client_ab');
const builds: { name: string; client: SettleClient; cpu: number[] }[] = [];
try {
  for (const [name, root] of [
    ['this build', here],
    ...(baseline === undefined ? [] : [['baseline', baseline]]),
  ] as const) {
    const client = (await load(root))({ connectionString: db.url, poolSize: workers });
    const pool = await client.getPool();
    await Promise.all(Array.from({ length: workers }, () => pool.query(sql.unsafe`select 1`)));
    builds.push({ name, client, cpu: [] });
  }
  for (let round = 0; round <= rounds; round += 1) {
    for (const build of round % 2 === 0 ? builds : [...builds].reverse()) {
      const started = process.cpuUsage();
      const t0 = performance.now();
      await cycles(build.client, chunk);
      const used = process.cpuUsage(started);
      if (round > 0) build.cpu.push((used.user + used.system) / chunk);
      if (round > 0)
        console.log(
          `round ${round} ${build.name.padEnd(10)} ${((used.user + used.system) / chunk).toFixed(0)} us CPU/cycle, ${((chunk * 1000) / (performance.now() - t0)).toFixed(0)} cycles/s`,
        );
    }
  }
} finally {
  await Promise.all(builds.map((b) => b.client.end()));
  await db.drop();
  await server.stop();
}
const median = (xs: readonly number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
console.log(
  `Node CPU per run() cycle, ${workers} workers, ${rounds} rounds of ${chunk} cycles per build (median / min):`,
);
for (const b of builds)
  console.log(`  ${b.name.padEnd(10)} ${median(b.cpu).toFixed(0)} / ${Math.min(...b.cpu).toFixed(0)} us`);
const [a, b] = builds;
if (a !== undefined && b !== undefined) {
  const ratios = a.cpu.map((x, i) => x / (b.cpu[i] ?? Number.NaN));
  console.log(
    `  this / baseline: median ${median(ratios).toFixed(3)} (rounds ${ratios.map((r) => r.toFixed(2)).join(', ')})`,
  );
}
