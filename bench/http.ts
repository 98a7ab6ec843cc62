// HTTP bench: the Express example app (examples/http/express-app.ts) driven by concurrent HTTP
// clients over loopback, with and without the Idempotency-Key middleware, and the same app doing
// the Stripe pattern by hand (bench/lib/http-stripe-app.ts).
//   npm run bench:http -- [--clients 16] [--seconds 5] [--rounds 3]
// Scenarios, alternated per round (A B C D A B C D ...), each after a one-second warm-up:
//   plain    POST /payments without the middleware (same handler, same app)
//   first    POST /payments with a new Idempotency-Key per request (claim + complete)
//   stripe   the same first requests to the app doing the Stripe pattern by hand (node-postgres)
//   replay   POST /payments re-sending keys that already completed (claim only)
// Reports requests/s (median of the rounds) and latency percentiles; every answer is checked.
import { randomUUID } from 'node:crypto';
import type { Server } from 'node:http';
import { availableParallelism, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createApp } from '../examples/http/express-app.js';
import { createSettleClient, type SettleClient } from '../src/index.js';
import { startBenchServer } from './lib/database.js';
import { closeServer, driveHttp, listen, postPayment, type HttpRun } from './lib/http-load.js';
import { createStripeApp } from './lib/http-stripe-app.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '16' },
    seconds: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log('Usage: npm run bench:http -- [--clients 1-64 (16)] [--seconds 1-60 (5)] [--rounds 1-10 (3)]');
  process.exit(0);
}
const bounded = (value: string, min: number, max: number, name: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new RangeError(`--${name} must be an integer ${min}-${max}`);
  return n;
};
const clients = bounded(values.clients, 1, 64, 'clients');
const seconds = bounded(values.seconds, 1, 60, 'seconds');
const rounds = bounded(values.rounds, 1, 10, 'rounds');

type Scenario = 'plain' | 'first' | 'stripe' | 'replay';
const TOKEN = 'acme:bench';

/** `clients` loops sending back to back for `ms`; every answer must be 201 (replayed when expected). */
function drive(url: string, scenario: Scenario, ms: number, replayKeys: readonly string[]): Promise<HttpRun> {
  let next = 0;
  return driveHttp(url, {
    clients,
    ms,
    token: TOKEN,
    name: scenario,
    replayed: scenario === 'replay',
    key: () =>
      scenario === 'plain' ? null : scenario === 'replay' ? replayKeys[next++ % replayKeys.length]! : randomUUID(),
  });
}

const percentile = (sorted: readonly number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function main(): Promise<void> {
  const server = await startBenchServer(() => {});
  const db = await server.createRunDatabase('http');
  let settle: SettleClient | undefined;
  const pool = new pg.Pool({ connectionString: db.url, max: Math.min(clients + 2, 20) });
  pool.on('error', () => {}); // an idle client told its database is dropped (at the end)
  const servers: Server[] = [];
  try {
    settle = createSettleClient({ connectionString: db.url, poolSize: Math.min(clients + 2, 20) });
    const plain = createApp(settle, { idempotent: false }).listen(0, '127.0.0.1');
    const keyed = createApp(settle).listen(0, '127.0.0.1');
    const byHand = createStripeApp(pool).listen(0, '127.0.0.1');
    servers.push(plain, keyed, byHand);
    const first = await listen(keyed);
    const urls: Record<Scenario, string> = {
      plain: await listen(plain),
      first,
      stripe: await listen(byHand),
      replay: first,
    };
    // Keys that completed once, for the replay scenario.
    const replayKeys = Array.from({ length: 1000 }, () => randomUUID());
    for (let i = 0; i < replayKeys.length; i += clients) {
      await Promise.all(
        replayKeys.slice(i, i + clients).map(async (key) => (await postPayment(urls.first, key, TOKEN)).arrayBuffer()),
      );
    }
    const results: Record<Scenario, HttpRun[]> = { plain: [], first: [], stripe: [], replay: [] };
    const order: Scenario[] = ['plain', 'first', 'stripe', 'replay'];
    const loadBefore = loadavg()[0]!;
    for (let round = 1; round <= rounds; round++) {
      for (const scenario of order) {
        await drive(urls[scenario], scenario, 1_000, replayKeys); // warm-up
        const run = await drive(urls[scenario], scenario, seconds * 1_000, replayKeys);
        results[scenario].push(run);
        console.error(`round ${round} ${scenario}: ${((run.requests * 1000) / run.elapsedMs).toFixed(0)} req/s`);
      }
    }
    const rps = (run: HttpRun): number => (run.requests * 1000) / run.elapsedMs;
    const plainRps = median(results.plain.map(rps));
    console.log(
      `\nHTTP bench: Express example app, ${clients} concurrent clients over loopback, ${rounds} x ${seconds} s per scenario`,
    );
    console.log(
      `node ${process.version}, PostgreSQL ${server.serverVersion}, synchronous_commit=${server.settings.synchronous_commit}`,
    );
    console.log(
      `load average (1 min) ${loadBefore.toFixed(1)} before, ${loadavg()[0]!.toFixed(1)} after, on ${availableParallelism()} CPUs\n`,
    );
    console.log('| scenario | requests/s (median) | rounds | vs plain | p50 ms | p99 ms |');
    console.log('|---|---|---|---|---|---|');
    for (const scenario of order) {
      const runs = results[scenario];
      const all = runs.flatMap((r) => r.latencies).sort((a, b) => a - b);
      const m = median(runs.map(rps));
      console.log(
        `| ${scenario} | ${m.toFixed(0)} | ${runs.map((r) => rps(r).toFixed(0)).join(' / ')} | ${(m / plainRps).toFixed(2)}x | ${percentile(all, 50).toFixed(1)} | ${percentile(all, 99).toFixed(1)} |`,
      );
    }
    const byRound = results.first.map((run, i) => rps(run) / rps(results.stripe[i] ?? run));
    console.log(
      `\nfirst / stripe (the middleware against the Stripe pattern by hand, median of the rounds' ratios): ${median(byRound).toFixed(2)}x (${byRound.map((r) => r.toFixed(2)).join(', ')})`,
    );
  } finally {
    await Promise.all(servers.map(closeServer));
    await settle?.end();
    await pool.end();
    await db.drop();
    await server.stop();
  }
}

await main();
