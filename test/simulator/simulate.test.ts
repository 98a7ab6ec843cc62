import { describe, expect, it } from 'vitest';
import { configFromFlags, FAULT_NAMES } from '../../src/simulator/config.js';
import { runSimulation } from '../../src/simulator/run.js';
import { planOperations } from '../../src/simulator/schedule.js';
import { useTestDatabase } from '../support/database.js';
import pg from 'pg';
import { readEngineState } from '../../src/checker/engine-state.js';
import { checkHistory } from '../../src/simulator/checker.js';
import type { History } from '../../src/simulator/history.js';
import { readDeliveries } from '../../src/simulator/rewards.js';
import { createSettleClient } from '../../src/client/client.js';

// A small real run with every fault on, against a fresh migrated database from the harness.
// Rates are high so 150 operations see every fault; waits are bounded by the 1 s lease.
const FLAGS = {
  seed: '7',
  workers: '4',
  operations: '150',
  'fault-crash-after-claim': '0.1',
  'fault-crash-after-effect': '0.1',
  'fault-lease-expiry': '0.1',
  'fault-caller-timeout': '0.1',
  'fault-stale-report': '0.1',
  'fault-slow-commit': '0.1',
  'fault-provider-outage': '0.1',
  'fault-duplicate': '0.15',
  'fault-different-payload': '0.15',
  'fault-binding-bump': '0.15',
};

const db = useTestDatabase('simulate');

describe('runSimulation', () => {
  it('runs 150 operations with every fault injected to a green report', async () => {
    const report = await runSimulation({ config: configFromFlags(FLAGS), connectionString: db.url });
    // Name the violations, so that a failure on a loaded machine says what happened.
    const failed = report.check.invariants.filter((i) => !i.ok).map((i) => `${i.name}: ${i.violations.join(' | ')}`);
    expect(failed).toEqual([]);
    expect(report.errors).toEqual({ count: 0, first: [] });
    expect(report.ok).toBe(true);
    // provider-outage leaves operations needing reconciliation; the reconciler resolves every one
    // (completed when the provider has the payout, failed when it has none).
    const r = report.reconciliation;
    expect(report.operations).toMatchObject({ planned: 150, issued: 150, failed: r.resolvedFailed, other: 0 });
    expect(report.operations.completed).toBe(150 - r.resolvedFailed);
    expect(r.needed).toBe(report.faults.find((f) => f.fault === 'provider-outage')?.injected);
    expect(r.resolvedCompleted).toBeGreaterThan(0);
    expect(r.resolvedFailed).toBeGreaterThan(0);
    expect(r.resolvedCompleted + r.resolvedFailed).toBe(r.needed);
    expect(r.undecided).toBe(0);
    expect(r.lookupsTimedOut).toBeGreaterThan(0);
    // The feed consumer credits every completed payout once, although its processes were killed
    // mid-batch; the naive settled_at poller loses the settlements that committed late.
    const { feed, naive } = report.consumers;
    expect(feed).toMatchObject({
      payouts: report.operations.completed,
      credited: report.operations.completed,
      missing: 0,
      creditedTwice: 0,
    });
    expect(feed.failedOutcomes).toBe(r.resolvedFailed);
    expect(feed.kills).toBeGreaterThan(0);
    expect(feed.processes).toBeGreaterThan(2);
    expect(naive?.heldPast).toBeGreaterThan(0);
    expect(naive?.missing).toBeGreaterThanOrEqual(naive?.heldPast ?? Infinity);
    expect(naive?.creditedTwice).toBe(0);
    for (const name of FAULT_NAMES) {
      const row = report.faults.find((f) => f.fault === name);
      expect(row?.injected, name).toBeGreaterThan(0);
      expect(Object.keys(row?.answers ?? {}).length, name).toBeGreaterThan(0);
    }
    const byFault = Object.fromEntries(report.faults.map((f) => [f.fault, f.answers]));
    expect(byFault['different-payload']).toEqual({
      'claim conflict': report.faults.find((f) => f.fault === 'different-payload')?.injected,
    });
    expect(byFault['binding-bump']).toEqual({
      'claim conflict': report.faults.find((f) => f.fault === 'binding-bump')?.injected,
    });
    expect(byFault['lease-expiry']?.['heartbeat fenced (settled)']).toBeGreaterThan(0);
    expect(byFault['caller-timeout']?.['reportUnknown recorded (outcome_unknown)']).toBeGreaterThan(0);
    // The retry after a crash asks the downstream first (run()'s reconcile) and does not pay again.
    expect(byFault['crash-after-effect']?.['reconcile found the payout: not paid again']).toBeGreaterThan(0);
    expect(byFault['crash-after-effect']?.['downstream deduplicated']).toBeUndefined();
    expect(byFault['caller-timeout']?.['run() unknown (effect_outcome_unknown)']).toBeGreaterThan(0);
    // A slow worker that ignores its lost lease pays again: only the downstream's idempotency stops it.
    expect(byFault['lease-expiry']?.['downstream deduplicated']).toBeGreaterThan(0);
  }, 240_000);

  it('a credit applied twice in the database fails feed-exactly-once, for the feed consumer only', async () => {
    // Another application's operation needing reconciliation in the same database: the run's
    // reconciler leases it (settle.lease_reconciliation has no tenant filter) and leaves it as it was.
    const app = createSettleClient({ connectionString: db.url, telemetry: false });
    const binding = { principal: 'someone', scopes: ['payouts:write'], generation: 1 };
    try {
      const claim = await app.claim({
        tenant: 'not-the-simulator',
        key: 'k1',
        request: { amount: 1 },
        binding,
        maxAttempts: 1,
      });
      if (claim.outcome !== 'acquired') throw new Error(`claim answered ${claim.outcome}`);
      expect(await app.reportUnknown(claim.attempt)).toMatchObject({ outcome: 'recorded' });
    } finally {
      await app.end();
    }
    const config = configFromFlags({
      ...FLAGS,
      seed: '9',
      operations: '40',
      faults: '0',
      'fault-slow-commit': '0.2',
      'fault-provider-outage': '0.2',
    });
    const report = await runSimulation({ config, connectionString: db.url });
    expect(report.ok).toBe(true);
    expect(report.reconciliation.needed).toBeGreaterThan(0);
    expect(report.reconciliation.undecided).toBe(0);
    const foreign = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const { rows: left } = await foreign.query(
        `select status::text, dead_letter_reason from settle.operations where tenant = 'not-the-simulator' and key = 'k1'`,
      );
      expect(left).toEqual([{ status: 'unknown', dead_letter_reason: 'needs_reconciliation' }]);
    } finally {
      await foreign.end();
    }
    const consumer = `${report.tenantPrefix}rewards`;
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const judge = async (): Promise<{ ok: boolean; violations: readonly string[] }> => {
        const engine = await readEngineState(pool, { tenantPrefix: report.tenantPrefix });
        const history: History = {
          intended: engine.operations.map((op) => ({
            tenant: op.tenant,
            key: op.key,
            amountCents: (op.request as { amount_cents: number }).amount_cents,
            bindingGeneration: 1,
          })),
          told: [],
          ...engine,
          payouts: [],
          deliveries: await readDeliveries(pool, report.tenantPrefix),
          consumers: [consumer],
        };
        const feed = checkHistory(history).invariants.find((i) => i.name === 'feed-exactly-once');
        return { ok: feed?.ok ?? false, violations: feed?.violations ?? [] };
      };
      expect(await judge()).toEqual({ ok: true, violations: [] });
      // The naive poller missed some (its rows are not judged); now the feed consumer's credit
      // of one payout is applied a second time, as a consumer without one-transaction acks would.
      const { rows } = await pool.query<{ key: string; event_id: string }>(
        `insert into settle_sim.sim_rewards (consumer, tenant, key, event_id, status, credited, amount_cents)
         select consumer, tenant, key, event_id, status, credited, amount_cents from settle_sim.sim_rewards
          where consumer = $1 and credited order by delivery_id limit 1
         returning key, event_id::text`,
        [consumer],
      );
      const judged = await judge();
      expect(judged.ok).toBe(false);
      expect(judged.violations[0]).toMatch(
        new RegExp(`/${rows[0]?.key}: event ${rows[0]?.event_id} was delivered 2 times to ${consumer}$`),
      );
    } finally {
      await pool.end();
    }
  }, 240_000);

  it('the unsafe downstream pays twice (a worker ignoring its lost lease) and the checker says so', async () => {
    const config = configFromFlags({
      ...FLAGS,
      seed: '8',
      operations: '60',
      faults: '0',
      'fault-lease-expiry': '0.5',
      'fault-slow-commit': '0',
      'fault-provider-outage': '0',
    });
    const report = await runSimulation({ config, connectionString: db.url, unsafeDownstream: true });
    expect(report.ok).toBe(false);
    expect(report.check.invariants.filter((i) => !i.ok).map((i) => i.name)).toEqual(['no-double-pay']);
  }, 240_000);

  it('the same seed gives the same fault schedule; another seed another one', () => {
    const config = configFromFlags(FLAGS);
    expect(planOperations(config)).toEqual(planOperations(configFromFlags(FLAGS)));
    expect(planOperations(config)).not.toEqual(planOperations(configFromFlags({ ...FLAGS, seed: '8' })));
    // A plan does not depend on how many operations run: operation i is planned the same.
    expect(planOperations({ ...config, operations: 20 })).toEqual(planOperations(config).slice(0, 20));
  });
});
