import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { percentile } from './pgbench-parse.js';

/**
 * The `client` scenario's driver: `clients` concurrent workers in this Node process, each on
 * its own connection, each looping claim + complete on fresh keys for `durationS` seconds —
 * the same cycle, keys, request and concurrency as bench/scripts/cycle.sql.
 *
 * The TypeScript client (src/client, createSettleClient / client.run) had not landed when this
 * was written, so the cycle goes through plain `pg` with named (prepared) statements — what
 * the client's run() helper is expected to send. Swap `openWorker` for the client when it lands.
 */
export interface ClientCycleResult {
  readonly driver: 'node-pg' | 'client';
  readonly statements: readonly { readonly command: string; readonly latencyMs: number }[];
  readonly processed: number;
  readonly tps: number;
  readonly latencyAverageMs: number;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
}

const CLAIM = {
  name: 'bench_claim',
  text: `select outcome, attempt, lease_token, fingerprint
           from settle.claim(tenant => 'bench', key => $1, request => $2::jsonb, principal => 'bench-app',
                             scopes => array['payments.write'], binding_generation => 0,
                             lease => interval '30 seconds', worker => 'node')`,
};
const COMPLETE = {
  name: 'bench_complete',
  text: `select outcome from settle.complete(tenant => 'bench', key => $1, attempt => $2, lease_token => $3,
                                            fingerprint => $4, principal => 'bench-app', scopes => array['payments.write'],
                                            binding_generation => 0, result => $5::jsonb)`,
};

interface ClaimRow {
  outcome: string;
  attempt: number;
  lease_token: string;
  fingerprint: string;
}

export async function runClientCycle(url: string, clients: number, durationS: number): Promise<ClientCycleResult> {
  const connections = await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = new pg.Client({ connectionString: url, application_name: 'pg-settle-bench-client' });
      await client.connect();
      return client;
    }),
  );
  const latencies: number[] = [];
  let claimMs = 0;
  let completeMs = 0;
  try {
    const started = performance.now();
    const deadline = started + durationS * 1000;
    await Promise.all(
      connections.map(async (client, worker) => {
        while (performance.now() < deadline) {
          const k = 100_000_000_000 + Math.floor(Math.random() * 899_999_999_999);
          const key = `op-${k}-n${worker}`;
          const t0 = performance.now();
          const claim = (
            await client.query<ClaimRow>({ ...CLAIM, values: [key, JSON.stringify({ amount: k % 10000, currency: 'EUR' })] })
          ).rows[0];
          if (claim?.outcome !== 'acquired') throw new Error(`client cycle: claim of fresh key ${key} answered ${claim?.outcome}`);
          const t1 = performance.now();
          const done = (
            await client.query<{ outcome: string }>({
              ...COMPLETE,
              values: [key, claim.attempt, claim.lease_token, claim.fingerprint, JSON.stringify({ charge: `ch-${k}` })],
            })
          ).rows[0];
          if (done?.outcome !== 'settled') throw new Error(`client cycle: complete of ${key} answered ${done?.outcome}`);
          const t2 = performance.now();
          claimMs += t1 - t0;
          completeMs += t2 - t1;
          latencies.push(t2 - t0);
        }
      }),
    );
    const elapsedS = (performance.now() - started) / 1000;
    const processed = latencies.length;
    return {
      driver: 'node-pg',
      statements: [
        { command: 'settle.claim (pg, prepared)', latencyMs: claimMs / Math.max(1, processed) },
        { command: 'settle.complete (pg, prepared)', latencyMs: completeMs / Math.max(1, processed) },
      ],
      processed,
      tps: processed / elapsedS,
      latencyAverageMs: latencies.reduce((a, b) => a + b, 0) / Math.max(1, processed),
      p50Ms: percentile(latencies, 50),
      p99Ms: percentile(latencies, 99),
    };
  } finally {
    await Promise.all(connections.map((client) => client.end().catch(() => {})));
  }
}
