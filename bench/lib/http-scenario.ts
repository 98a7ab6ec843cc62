import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createApp } from '../../examples/http/express-app.js';
import { createSettleClient } from '../../src/client/index.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { closeServer, driveHttp, listen, type HttpRun } from './http-load.js';
import { createStripeApp } from './http-stripe-app.js';
import { percentile } from './pgbench.js';
import type { ScenarioContext } from './scenarios.js';
import type { Check, RunResult } from './types.js';
import { check, completedOperations, unfinishedOperations, verifyBaseline } from './verify.js';

/**
 * http: through the stack, against what a user would otherwise write. The Express example app
 * with pg-settle's Idempotency-Key middleware (`http`) and the same app doing the Stripe pattern
 * by hand with node-postgres (`http-stripe`, bench/lib/http-stripe-app.ts), both on one
 * database, served by this process and driven by `clients` concurrent fetch loops over loopback,
 * every request a new key (a first request: claim, handler, complete). One after the other in
 * each round (the order swapped every other round), each after an unmeasured warm-up. tps is
 * requests per second; every answer must be 201 and not a replay, and the database must hold
 * one settled operation (one finished key row) per request.
 */

const TOKEN = 'bench:bench-app';

export async function runHttp(ctx: ScenarioContext, clients: number, round: number): Promise<RunResult[]> {
  const db = await ctx.server.createRunDatabase(`http_${clients}`);
  const settle = createSettleClient({ connectionString: db.url, poolSize: clients });
  const pool = new pg.Pool({ connectionString: db.url, max: clients });
  // An idle client of the pool told that its database is dropped (at the end of the run) is an
  // 'error' event of the pool: without a listener it would end the process.
  pool.on('error', () => {});
  const keyed = createApp(settle).listen(0, '127.0.0.1');
  const byHand = createStripeApp(pool).listen(0, '127.0.0.1');
  try {
    const sides = [
      { label: 'http', url: await listen(keyed) },
      { label: 'http-stripe', url: await listen(byHand) },
    ];
    const results: RunResult[] = [];
    for (const side of round % 2 === 1 ? sides : [...sides].reverse()) {
      const drive = (length: { ms: number } | { perClient: number }): Promise<HttpRun> =>
        driveHttp(side.url, { clients, ...length, key: randomUUID, replayed: false, token: TOKEN, name: side.label });
      const warm =
        ctx.opts.warmup === null
          ? null
          : await drive(
              ctx.opts.warmup.kind === 'seconds'
                ? { ms: ctx.opts.warmup.seconds * 1000 }
                : { perClient: ctx.opts.warmup.perClient },
            );
      const measured = await drive(
        ctx.opts.length.kind === 'seconds'
          ? { ms: ctx.opts.length.seconds * 1000 }
          : { perClient: ctx.opts.length.perClient },
      );
      const requests = measured.requests + (warm?.requests ?? 0);
      const checks = await withPgClient(db.url, async (c): Promise<Check[]> => {
        if (side.label === 'http') {
          const completed = await completedOperations(c);
          const unfinished = await unfinishedOperations(c);
          return [
            check(
              'one settled operation per request',
              completed === requests,
              `${completed} completed for ${requests} requests`,
            ),
            check('nothing left unsettled', unfinished === 0, `${unfinished} unfinished`),
          ];
        }
        return (await verifyBaseline(c, 'stripe', { processed: requests, maxInFlight: 0 })).checks;
      });
      const latencies = measured.latencies;
      results.push({
        scenario: 'http',
        label: side.label,
        clients,
        round,
        driver: 'client',
        durationS: measured.elapsedMs / 1000,
        transactionsPerClient: ctx.opts.length.kind === 'transactions' ? ctx.opts.length.perClient : null,
        warmupS: (warm?.elapsedMs ?? 0) / 1000,
        tps: (measured.requests * 1000) / measured.elapsedMs,
        processed: measured.requests,
        failed: 0,
        retried: 0,
        latencyAverageMs: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
        latencyStddevMs: null,
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        walBytesPerOp: null,
        fpiPerOp: null,
        checkpointsDuring: 0,
        statements: [],
        counters: { requests: measured.requests, warmupRequests: warm?.requests ?? 0 },
        checks,
      });
    }
    return results;
  } finally {
    await closeServer(keyed);
    await closeServer(byHand);
    await settle.end();
    await pool.end();
    await db.drop();
  }
}
