import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { startBenchServer } from '../lib/database.js';
import { baselineRoot, option, REPO_ROOT } from '../lib/script-options.js';

/**
 * Process CPU per HTTP request of two builds of the middleware and client, in one process against
 * one real database, interleaved in short chunks so that the machine's noise hits both alike
 * (bench/ab/http-cpu.ts runs one build per process, which a loaded machine turns into noise):
 *
 *   npx tsx bench/ab/http.ts --baseline <checkout root> [--scenario first|replay] [--clients 16] [--chunk 200] [--rounds 9]
 *
 * `<checkout root>` holds the other build's src/ and examples/ (e.g. `git archive <commit> src
 * examples | tar -x -C bench/out/base`). Each build serves the Express example app
 * (examples/http/express-app.ts) with a client of its own; `clients` concurrent keep-alive
 * requests (undici's fetch, in this process: the same load generator for both builds) per
 * chunk, alternating which build goes first; the first round warms up and is not counted. Every
 * answer must be 201. Prints each build's CPU (user + system) per request, median and minimum
 * of the rounds, and the median of the per-round ratios this / baseline.
 */
const scenario = option('scenario', 'first');
if (scenario !== 'first' && scenario !== 'replay') throw new Error('--scenario first or replay');
const clients = Number(option('clients', '16'));
const chunk = Number(option('chunk', '200'));
const rounds = Number(option('rounds', '9'));
const baseline = baselineRoot();
const here = REPO_ROOT;

interface Build {
  readonly name: string;
  readonly url: string;
  readonly close: () => Promise<void>;
  readonly cpu: number[];
}

const server = await startBenchServer(() => {});
const db = await server.createRunDatabase('http_ab');
const builds: Build[] = [];
try {
  for (const [name, root] of [
    ['this build', here],
    ...(baseline === undefined ? [] : [['baseline', baseline]]),
  ] as const) {
    const load = async (file: string) => import(pathToFileURL(path.join(root, file)).href);
    const { createApp } = await load('examples/http/express-app.ts');
    const { createSettleClient } = await load('src/index.ts');
    const settle = createSettleClient({ connectionString: db.url, poolSize: Math.min(clients + 2, 20) });
    const app: Server = createApp(settle, { idempotent: true }).listen(0, '127.0.0.1');
    await new Promise((resolve) => app.once('listening', resolve));
    builds.push({
      name,
      url: `http://127.0.0.1:${(app.address() as AddressInfo).port}/payments`,
      close: async () => {
        await new Promise((resolve) => app.close(resolve));
        await settle.end();
      },
      cpu: [],
    });
  }
  const post = async (url: string, key: string): Promise<void> => {
    const response = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer acme:bench',
        'idempotency-key': `"${key}"`,
      },
      body: JSON.stringify({ amount: '19.99' }),
    });
    await response.arrayBuffer();
    if (response.status !== 201) throw new Error(`${scenario}: answered ${response.status}`);
  };
  const replayKeys = Array.from({ length: 200 }, () => randomUUID());
  if (scenario === 'replay') {
    for (const build of builds) for (const key of replayKeys) await post(build.url, key);
  }
  let next = 0;
  const requests = async (url: string, count: number): Promise<void> => {
    let left = count;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (left > 0) {
          left -= 1;
          await post(url, scenario === 'first' ? randomUUID() : replayKeys[next++ % replayKeys.length]!);
        }
      }),
    );
  };
  for (let round = 0; round <= rounds; round += 1) {
    for (const build of round % 2 === 0 ? builds : [...builds].reverse()) {
      const started = process.cpuUsage();
      const t0 = performance.now();
      await requests(build.url, chunk);
      const used = process.cpuUsage(started);
      if (round === 0) continue;
      build.cpu.push((used.user + used.system) / chunk);
      console.log(
        `round ${round} ${build.name.padEnd(10)} ${((used.user + used.system) / chunk).toFixed(0)} us CPU/request, ${((chunk * 1000) / (performance.now() - t0)).toFixed(0)} req/s`,
      );
    }
  }
} finally {
  await Promise.all(builds.map((b) => b.close()));
  await db.drop();
  await server.stop();
}
const median = (xs: readonly number[]): number =>
  [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
console.log(
  `process CPU per ${scenario} request, ${clients} clients, ${rounds} rounds of ${chunk} requests per build (median / min):`,
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
