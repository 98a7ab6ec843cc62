import { describe, expect, it } from 'vitest';
import { check, describeViolations } from './harness/checker.js';
import { recordFigures } from './harness/figures.js';
import { readEngineState } from '../../src/checker/engine-state.js';
import { summarizeHistory } from './harness/history.js';
import { runWorkload } from './harness/workload.js';
import { useReliabilityDatabase } from './support/database.js';

// The seeded random workload against the real engine, checked by the history checker.
// CI: a few thousand calls. RELIABILITY_SOAK=1: a long run (RELIABILITY_OPS overrides the
// count, RELIABILITY_SEED the seed; the seed is printed so a failure can be replayed).

const db = useReliabilityDatabase('workload');
const soak = process.env.RELIABILITY_SOAK === '1';
const operations = Number(process.env.RELIABILITY_OPS ?? (soak ? 200_000 : 5_000));
const seed = Number(process.env.RELIABILITY_SEED ?? Math.floor(Math.random() * 2 ** 31));

describe('randomized workload', () => {
  it(
    `${operations} calls over 8 connections and 50 key slots: 0 violations (seed ${seed})`,
    async () => {
      const run = await runWorkload({ url: db.url, seed, operations, processes: 8, keys: 50 });
      const admin = await db.connect();
      const state = await readEngineState(admin, { tenants: [run.tenant] });
      const ops = run.history.ops();
      const report = check(ops, state);
      const counts = summarizeHistory(ops);
      const byType = { ok: counts['type:ok'] ?? 0, fail: counts['type:fail'] ?? 0, info: counts['type:info'] ?? 0 };
      console.log(
        JSON.stringify({
          seed,
          elapsedMs: run.elapsedMs,
          calls: counts.total,
          ...byType,
          keys: run.keysUsed,
          operationsInDb: state.operations.length,
          attemptsInDb: state.attempts.length,
          auditRows: state.audit.length,
          faults: run.faults,
          resolutions: run.resolutions,
          statuses: Object.fromEntries(
            ['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'].map((s) => [
              s,
              state.operations.filter((o) => o.status === s).length,
            ]),
          ),
          outcomes: Object.fromEntries(Object.entries(counts).filter(([k]) => k.includes(':'))),
          violations: report.violations.length,
        }),
      );
      recordFigures({
        scenario: soak ? 'workload/soak' : 'workload',
        operations: ops.length,
        faults: run.faults.expiredLeases + run.faults.killedConnections,
        violations: report.violations.length,
        details: {
          seed,
          ...byType,
          keys: run.keysUsed,
          attempts: state.attempts.length,
          leaseExpiries: run.faults.expiredLeases,
          backendsKilled: run.faults.killedConnections,
          resolved: (run.resolutions.resolved_completed ?? 0) + (run.resolutions.resolved_failed ?? 0),
          completed: state.operations.filter((o) => o.status === 'completed').length,
          seconds: Math.round(run.elapsedMs / 1000),
        },
      });
      expect(report.violations, describeViolations(report)).toEqual([]);
      expect(counts['type:ok'] ?? 0).toBeGreaterThan(operations / 2);
      expect(state.operations.some((o) => o.status === 'completed')).toBe(true);
    },
    soak ? 3_600_000 : 240_000,
  );
});
