import { describe, expect, it } from 'vitest';
import { configFromFlags, FAULT_NAMES } from '../../src/simulator/config.js';
import { runSimulation } from '../../src/simulator/run.js';
import { planOperations } from '../../src/simulator/schedule.js';
import { useTestDatabase } from '../support/database.js';

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
  'fault-duplicate': '0.15',
  'fault-different-payload': '0.15',
  'fault-binding-bump': '0.15',
};

const db = useTestDatabase('simulate');

describe('runSimulation', () => {
  it('runs 150 operations with every fault injected to a green report', async () => {
    const report = await runSimulation({ config: configFromFlags(FLAGS), connectionString: db.url });
    const failed = report.check.invariants.filter((i) => !i.ok);
    expect(failed).toEqual([]);
    expect(report.errors).toEqual({ count: 0, first: [] });
    expect(report.ok).toBe(true);
    expect(report.operations).toMatchObject({ planned: 150, issued: 150, completed: 150, failed: 0, other: 0 });
    for (const name of FAULT_NAMES) {
      const row = report.faults.find((f) => f.fault === name);
      expect(row?.injected, name).toBeGreaterThan(0);
      expect(Object.keys(row?.answers ?? {}).length, name).toBeGreaterThan(0);
    }
    const byFault = Object.fromEntries(report.faults.map((f) => [f.fault, f.answers]));
    expect(byFault['different-payload']).toEqual({ 'claim conflict': report.faults.find((f) => f.fault === 'different-payload')?.injected });
    expect(byFault['binding-bump']).toEqual({ 'claim conflict': report.faults.find((f) => f.fault === 'binding-bump')?.injected });
    expect(byFault['lease-expiry']?.['heartbeat fenced (settled)']).toBeGreaterThan(0);
    expect(byFault['caller-timeout']?.['reportUnknown recorded (outcome_unknown)']).toBeGreaterThan(0);
    // The retry after a crash asks the downstream first (run()'s reconcile) and does not pay again.
    expect(byFault['crash-after-effect']?.['reconcile found the payout: not paid again']).toBeGreaterThan(0);
    expect(byFault['crash-after-effect']?.['downstream deduplicated']).toBeUndefined();
    expect(byFault['caller-timeout']?.['run() unknown (effect_outcome_unknown)']).toBeGreaterThan(0);
    // A slow worker that ignores its lost lease pays again: only the downstream's idempotency stops it.
    expect(byFault['lease-expiry']?.['downstream deduplicated']).toBeGreaterThan(0);
  });

  it('the unsafe downstream pays twice (a worker ignoring its lost lease) and the checker says so', async () => {
    const config = configFromFlags({ ...FLAGS, seed: '8', operations: '60', faults: '0', 'fault-lease-expiry': '0.5' });
    const report = await runSimulation({ config, connectionString: db.url, unsafeDownstream: true });
    expect(report.ok).toBe(false);
    expect(report.check.invariants.filter((i) => !i.ok).map((i) => i.name)).toEqual(['no-double-pay']);
  });

  it('the same seed gives the same fault schedule; another seed another one', () => {
    const config = configFromFlags(FLAGS);
    expect(planOperations(config)).toEqual(planOperations(configFromFlags(FLAGS)));
    expect(planOperations(config)).not.toEqual(planOperations(configFromFlags({ ...FLAGS, seed: '8' })));
    // A plan does not depend on how many operations run: operation i is planned the same.
    expect(planOperations({ ...config, operations: 20 })).toEqual(planOperations(config).slice(0, 20));
  });
});
