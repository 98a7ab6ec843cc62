import type pg from 'pg';
import type { DatabaseTransactionConnection } from 'slonik';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/client/client.js';
import { isRetryable, SettleRetryableError } from '../../src/client/errors.js';
import { roleUrl } from './harness/app-url.js';
import { gate, waitForBackends } from './harness/backends.js';
import { check, describeViolations } from './harness/checker.js';
import { readEngineState } from '../../src/checker/engine-state.js';
import { countCalls, ScenarioTally, SETTLE_CALLS } from './harness/scenario-tally.js';
import { useReliabilityDatabase } from './support/database.js';

// 40P01: no single engine call can deadlock (each locks one operation row), but a caller's own
// transaction that settles two operations can, when another transaction settles the same two in
// the opposite order. Transaction A claims and completes k1, B claims and completes k2; only
// when both are done does A claim k2 (it waits on B's uncommitted reservation), and only when
// pg_stat_activity shows A waiting on a Lock does B claim k1: a wait-for cycle, which
// PostgreSQL's deadlock detector breaks after deadlock_timeout (100 ms here) by aborting one.

const db = useReliabilityDatabase('faults_deadlock');
const TENANT = 'faults-deadlock';
const BINDING = { principal: 'alice', scopes: ['pay'], generation: 1 };
const KEYS = ['k1', 'k2'] as const;
const clients: SettleClient[] = [];
let admin: pg.Client;
let tally = new ScenarioTally('faults-deadlock');

beforeAll(async () => {
  admin = await db.connect();
});
afterEach(({ task }) => {
  tally.record(task.result?.state === 'fail');
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.end().catch(() => {})));
});

/** A typed client on one connection as settle_app, with a short deadlock_timeout (startup option: a superuser setting). */
function deadlockClient(applicationName: string): SettleClient {
  const client = createSettleClient({
    connectionString: roleUrl(db.url, applicationName, 'settle_app', { deadlock_timeout: '100ms' }),
    poolSize: 1,
  });
  clients.push(client);
  return countCalls(client, SETTLE_CALLS, () => (tally.operations += 1));
}

/** Claims each key and completes it when acquired, inside `tx`; `between` runs before the second key. */
async function settleInOrder(
  client: SettleClient,
  tx: DatabaseTransactionConnection,
  keys: readonly string[],
  label: string,
  between: () => Promise<void>,
): Promise<string[]> {
  const outcomes: string[] = [];
  for (const [i, key] of keys.entries()) {
    if (i === 1) await between();
    const claimed = await client.claim(
      { tenant: TENANT, key, request: { key, amount: 100 }, binding: BINDING },
      { connection: tx },
    );
    if (claimed.outcome !== 'acquired') {
      outcomes.push(claimed.outcome);
      continue;
    }
    const observed = await client.complete(claimed.attempt, { receipt: `${label}-${key}` }, { connection: tx });
    outcomes.push(observed.outcome);
  }
  return outcomes;
}

describe('deadlock (40P01) between caller transactions', () => {
  it('two transactions settling k1 and k2 in opposite orders: one aborted with 40P01 as SettleRetryableError, its retry replays, one settlement per key', async () => {
    tally = new ScenarioTally('faults-deadlock/opposite-order');
    const sides = [
      { label: 'a', app: 'reliability-deadlock-a', keys: [...KEYS], reached: gate(), go: gate() },
      { label: 'b', app: 'reliability-deadlock-b', keys: [...KEYS].reverse(), reached: gate(), go: gate() },
    ] as const;
    const runs = sides.map((side) => {
      const client = deadlockClient(side.app);
      const attempt = async (between: () => Promise<void>) =>
        (await client.getPool()).transaction((tx) => settleInOrder(client, tx, side.keys, side.label, between), 0);
      const first = attempt(async () => {
        side.reached.open();
        await side.go.wait;
      }).then(
        (outcomes) => ({ ok: true as const, outcomes }),
        (error: unknown) => ({ ok: false as const, error }),
      );
      return { side, client, attempt, first };
    });
    const [a, b] = runs;
    if (a === undefined || b === undefined) throw new Error('unreachable');

    // Both first keys settled (uncommitted); A asks for k2 and is parked behind B's reservation.
    await Promise.all([a.side.reached.wait, b.side.reached.wait]);
    a.side.go.open();
    await waitForBackends(admin, a.side.app, { count: 1, waitEventType: 'Lock' });
    // B asks for k1: the cycle is closed.
    b.side.go.open();
    const results = await Promise.all(runs.map((r) => r.first));
    tally.fault('deadlock40P01');

    const losers = runs.filter((_, i) => !results[i]?.ok);
    const winners = runs.filter((_, i) => results[i]?.ok === true);
    expect(losers).toHaveLength(1);
    const lost = results.find((r) => !r.ok);
    const won = results.find((r) => r.ok);
    if (lost === undefined || lost.ok || won === undefined || !won.ok) throw new Error('unreachable');
    expect(lost.error).toBeInstanceOf(SettleRetryableError);
    expect((lost.error as SettleRetryableError).sqlstate).toBe('40P01');
    expect((lost.error as SettleRetryableError).code).toBe('40P01');
    expect(isRetryable(lost.error)).toBe(true);
    expect(won.outcomes).toEqual(['settled', 'settled']);

    // The aborted transaction left nothing: one attempt per key, both by the winner.
    const [loser] = losers;
    const [winner] = winners;
    if (loser === undefined || winner === undefined) throw new Error('unreachable');
    const attempts = await admin.query<{ key: string; attempts: number }>(
      'select key, count(*)::int as attempts from settle.attempts where tenant = $1 group by key order by key',
      [TENANT],
    );
    expect(attempts.rows).toEqual([
      { key: 'k1', attempts: 1 },
      { key: 'k2', attempts: 1 },
    ]);

    // Retrying the loser's whole transaction succeeds: both keys replay the winner's results.
    const retried = await loser.attempt(async () => {});
    expect(retried).toEqual(['replay', 'replay']);

    const settlements = await admin.query<{ key: string; attempt: number; result: unknown }>(
      'select key, attempt, result from settle.settlements where tenant = $1 order by key',
      [TENANT],
    );
    expect(settlements.rows).toEqual(
      KEYS.map((key) => ({ key, attempt: 1, result: { receipt: `${winner.side.label}-${key}` } })),
    );
    const records = await Promise.all(
      KEYS.map((key) => winner.client.get({ tenant: TENANT, key, request: { key, amount: 100 }, binding: BINDING })),
    );
    expect(records.map((r) => (r.outcome === 'found' ? [r.status, r.settledAttempt] : [r.outcome]))).toEqual([
      ['completed', 1],
      ['completed', 1],
    ]);

    // Audit replay: no downgrade, one settlement per key, the trail ends in the stored state.
    const state = await readEngineState(admin, { tenants: [TENANT] });
    const report = check([], state);
    tally.violations += report.violations.length;
    expect(report.violations, describeViolations(report)).toEqual([]);
    const trail = state.audit.map((r) => `${r.key}:${r.event}:${r.outcome}:${r.statusBefore ?? '-'}->${r.statusAfter}`);
    // The retry's replay answers are read-only and write no audit row (docs/protocol.md).
    expect(trail).toEqual([
      'k1:claim:acquired:-->running',
      'k1:complete:settled:running->completed',
      'k2:claim:acquired:-->running',
      'k2:complete:settled:running->completed',
    ]);
    tally.details.victim = loser.side.label;
  }, 60_000);
});
