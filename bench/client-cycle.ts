import { performance } from 'node:perf_hooks';
import { sql } from 'slonik';
import { createSettleClient } from '../src/client/index.js';
import { percentile } from './pgbench-parse.js';
import type { RunLength } from './types.js';

/**
 * The `client` scenario's driver: `clients` concurrent workers in this Node process sharing one
 * TypeScript client (createSettleClient, pool of `clients` connections), each looping
 * `client.run()` on fresh keys for a number of seconds or of cycles per worker: the same cycle (claim, effect,
 * complete), keys, request and concurrency as bench/scripts/cycle.sql. The effect is a no-op
 * returning the result, like the script's.
 */
export interface ClientCycleResult {
  readonly driver: 'client';
  readonly statements: readonly { readonly command: string; readonly latencyMs: number }[];
  readonly processed: number;
  readonly elapsedS: number;
  readonly tps: number;
  readonly latencyAverageMs: number;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
}

export async function runClientCycle(
  url: string,
  clients: number,
  length: RunLength,
  options: { readonly preparedStatements?: boolean; readonly createClient?: typeof createSettleClient } = {},
): Promise<ClientCycleResult> {
  const { createClient = createSettleClient, ...clientOptions } = options;
  const client = createClient({ ...clientOptions, connectionString: url, poolSize: clients });
  const latencies: number[] = [];
  try {
    // Open the pool's connections before the clock starts, as pgbench does.
    const pool = await client.getPool();
    await Promise.all(Array.from({ length: clients }, () => pool.query(sql.unsafe`select 1`)));
    const started = performance.now();
    const deadline = length.kind === 'seconds' ? started + length.seconds * 1000 : Number.POSITIVE_INFINITY;
    const cycles = length.kind === 'transactions' ? length.perClient : Number.POSITIVE_INFINITY;
    await Promise.all(
      Array.from({ length: clients }, async (_, worker) => {
        // At least one cycle per worker, so even a starved timed run measures something.
        for (let done = 0; done < cycles && (done === 0 || performance.now() < deadline); done++) {
          const k = 100_000_000_000 + Math.floor(Math.random() * 899_999_999_999);
          const key = `op-${k}-n${worker}`;
          const t0 = performance.now();
          const outcome = await client.run(
            {
              tenant: 'bench',
              key,
              request: { amount: k % 10000, currency: 'EUR' },
              binding: { principal: 'bench-app', scopes: ['payments.write'], generation: 0 },
              leaseMs: 30_000,
              worker: 'node',
            },
            async () => ({ charge: `ch-${k}` }),
          );
          if (outcome.outcome !== 'completed' || outcome.settledBy !== 'this_attempt') {
            throw new Error(`client cycle: run() of fresh key ${key} answered ${JSON.stringify(outcome)}`);
          }
          latencies.push(performance.now() - t0);
        }
      }),
    );
    const elapsedS = (performance.now() - started) / 1000;
    const processed = latencies.length;
    const average = latencies.reduce((a, b) => a + b, 0) / Math.max(1, processed);
    return {
      driver: 'client',
      statements: [{ command: 'client.run (claim + effect + complete)', latencyMs: average }],
      processed,
      elapsedS,
      tps: processed / elapsedS,
      latencyAverageMs: average,
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
    };
  } finally {
    await client.end();
  }
}
