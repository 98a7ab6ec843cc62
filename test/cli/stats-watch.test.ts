import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { formatAge } from '../../src/cli/watch.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { type CliRun, runCli } from '../support/cli.js';

// `pg-settle stats --watch` through the real binary with stdout a pipe (not a terminal): plain
// blocks, no escape codes, the gauges of settle.metrics and the census of settle.stats.
const binding = { principal: 'watch-user', generation: 1 };

function cli(args: readonly string[]): Promise<CliRun> {
  return runCli(args, { databaseUrl: db.url });
}

let db: TestDatabase;
let client: SettleClient;
beforeAll(async () => {
  db = await createTestDatabase('cli_stats_watch');
  client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  // One live lease, one completed, one dead letter.
  await client.claim({ tenant: 'w', key: 'live', request: {}, binding, leaseMs: 600_000 });
  const done = await client.claim({ tenant: 'w', key: 'done', request: {}, binding });
  if (done.outcome === 'acquired') await client.complete(done.attempt, 'ok');
  const dead = await client.claim({ tenant: 'w', key: 'dead', request: {}, binding, maxAttempts: 1 });
  if (dead.outcome === 'acquired') await client.fail(dead.attempt, { code: 'declined' });
});
afterAll(async () => {
  await client?.end();
  await db?.drop();
});

describe('pg-settle stats --watch', () => {
  it('piped: one plain block per refresh with the gauges, the census and, after the second census, rates', async () => {
    const run = await cli(['stats', '--watch', '--interval', '600ms', '--census-interval', '1s', '--count', '3']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).not.toContain('\x1b');
    const blocks = run.stdout.trim().split('\n\n\n');
    expect(run.stdout.match(/^pg-settle stats --watch /gm)).toHaveLength(3);
    expect(blocks[0]).toContain('in flight 1   lapsed leases 0   unknown 0   conflict 0');
    expect(blocks[0]).toMatch(/dead letters: failed 1, needs reconciliation 0 \(oldest \d+s\)/);
    expect(blocks[0]).toContain('last 5m00s: conflicts 0, refused observations 0');
    // Lease counts appear once per screen (the gauges): the census table, read up to
    // --census-interval earlier, has no lease columns that could contradict them.
    expect(run.stdout).toMatch(/^w\s+3\s+0\s+1\s+0\s+0\s+1\s+1\s+1\s+3$/m);
    for (const block of run.stdout.split(/^(?=pg-settle stats --watch )/m).filter((b) => b.trim() !== '')) {
      expect(block.match(/in flight|lapsed/g)).toEqual(['in flight', 'lapsed', 'lapsed']);
      expect(block).toMatch(/^per tenant \(settle\.stats, read \d+s ago; live and lapsed leases: the gauges above\)$/m);
    }
    expect(run.stdout).toContain('rates: after the second census');
    expect(run.stdout).toMatch(/rates \/s: new operations 0, completed 0, failed 0, attempts 0/);
  });

  it('--json: one JSON document per refresh', async () => {
    const run = await cli(['stats', '--watch', '--interval', '100ms', '--count', '2', '--json']);
    expect(run.code).toBe(0);
    const lines = run.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { metrics: Record<string, unknown>; tenants: unknown[] });
    expect(lines).toHaveLength(2);
    expect(lines[0]?.metrics).toMatchObject({ operationsInFlight: 1, deadLettersFailed: 1, recentWindowSeconds: 300 });
    expect(lines[1]?.tenants).toHaveLength(1);
  });

  it('refuses watch flags without --watch (exit 2)', async () => {
    expect((await cli(['stats', '--interval', '1s'])).code).toBe(2);
    expect((await cli(['stats', '--watch', '--interval', '10ms'])).code).toBe(2);
  });

  it('formats ages for people', () => {
    expect([0, 42, 187, 7_500, 277_200].map(formatAge)).toEqual(['0s', '42s', '3m07s', '2h05m', '3d05h']);
  });
});
