import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { roleUrl } from './harness/app-url.js';
import { check, describeViolations, type CheckReport } from './harness/checker.js';
import { recordFigures } from './harness/figures.js';
import { readEngineState } from '../../src/checker/engine-state.js';
import { History } from './harness/history.js';
import { runScenario, SCENARIO_NAMES } from './harness/mutant-scenarios.js';
import {
  applyReplacement,
  MUTANTS,
  writeMutatedMigrations,
  type Mutant,
  type ScenarioName,
} from './harness/mutants.js';
import { recording } from './harness/recorder.js';
import { createQuietPool, createSqlDriver } from './harness/sql-driver.js';
import { runWorkload } from './harness/workload.js';
import { createTestDatabase } from '../../src/testing/index.js';

// The suite against deliberately broken engines: each mutant (test/reliability/harness/mutants.ts) is a
// copy of sql/migrations with one bug planted; a fresh database from template0 is migrated with
// it, the seeded random workload runs, then a short scenario that reaches the bug, and the
// history checker must report the invariants the mutant breaks. The control is the same
// procedure on an unmutated copy, with the same seed: 0 violations, so the checker
// discriminates. RELIABILITY_SEED fixes the seed; RELIABILITY_MUTANT_OPS the workload's calls.

const seed = Number(process.env.RELIABILITY_SEED ?? Math.floor(Math.random() * 2 ** 31));
const operations = Number(process.env.RELIABILITY_MUTANT_OPS ?? 1000);
const SCENARIO_TENANT = 'mutant-scenarios';

interface EngineRun {
  /** The random workload's history against its final state. */
  readonly workload: CheckReport;
  /** The targeted scenarios' history against their final state. */
  readonly scenario: CheckReport;
  readonly calls: number;
  readonly faults: number;
}

async function runAgainst(mutant: Mutant | undefined, scenarios: readonly ScenarioName[]): Promise<EngineRun> {
  const copy = await writeMutatedMigrations(mutant);
  const db = await createTestDatabase(`mutant_${mutant?.name ?? 'control'}`, { template: 'template0' });
  const admin = new pg.Client({ connectionString: db.url, application_name: 'reliability-admin' });
  admin.on('error', () => {});
  const pool = createQuietPool(roleUrl(db.url, 'reliability-mutant-scenario'), 3);
  try {
    await migrate(db.url, { dir: copy.dir });
    await admin.connect();
    const run = await runWorkload({ url: db.url, seed, operations, processes: 4, keys: 12 });
    const history = new History();
    const driver = createSqlDriver(pool);
    const p = [
      recording(driver, history, 100),
      recording(driver, history, 101),
      recording(driver, history, 102),
    ] as const;
    for (const name of scenarios) await runScenario(name, { tenant: SCENARIO_TENANT, p, admin });
    const workloadOps = run.history.ops();
    const scenarioOps = history.ops();
    return {
      workload: check(workloadOps, await readEngineState(admin, { tenants: [run.tenant] })),
      scenario: check(scenarioOps, await readEngineState(admin, { tenants: [SCENARIO_TENANT] })),
      calls: workloadOps.length + scenarioOps.length,
      faults: run.faults.expiredLeases + run.faults.killedConnections,
    };
  } finally {
    await pool.end().catch(() => {});
    await admin.end().catch(() => {});
    await db.drop();
    await copy.remove();
  }
}

const invariantsOf = (report: CheckReport): string =>
  Object.entries(report.byInvariant)
    .map(([k, v]) => `${k}:${v}`)
    .join(' ');

describe('mutants of the engine', () => {
  it('a replacement must match exactly once (a mutant cannot rot silently)', () => {
    expect(() => applyReplacement('a b a', { file: 'x.sql', find: 'a', replace: 'c' })).toThrow(/matched 2 times/);
    expect(() => applyReplacement('a b', { file: 'x.sql', find: 'z', replace: 'c' })).toThrow(/matched 0 times/);
    expect(applyReplacement('a b', { file: 'x.sql', find: 'b', replace: 'c' })).toBe('a c');
  });

  it(`control: the unmutated engine, same procedure and seed ${seed}, all scenarios: 0 violations`, async () => {
    const run = await runAgainst(undefined, SCENARIO_NAMES);
    const violations = run.workload.violations.length + run.scenario.violations.length;
    recordFigures({
      scenario: 'mutants/control',
      operations: run.calls,
      faults: run.faults,
      violations,
      details: { seed, workloadCalls: operations, scenarios: SCENARIO_NAMES.length },
    });
    expect(run.workload.violations, describeViolations(run.workload)).toEqual([]);
    expect(run.scenario.violations, describeViolations(run.scenario)).toEqual([]);
  }, 180_000);

  for (const mutant of MUTANTS) {
    it(`${mutant.name}: ${mutant.bug} -> ${mutant.expected.join(', ')} (seed ${seed})`, async () => {
      const run = await runAgainst(mutant, [mutant.scenario]);
      const found = run.workload.violations.length + run.scenario.violations.length;
      const missing = mutant.expected.filter((inv) => (run.scenario.byInvariant[inv] ?? 0) === 0);
      console.log(
        JSON.stringify({
          mutant: mutant.name,
          seed,
          workload: invariantsOf(run.workload),
          scenario: invariantsOf(run.scenario),
        }),
      );
      recordFigures({
        scenario: `mutants/${mutant.name}`,
        operations: run.calls,
        // The planted bug, plus the workload nemesis's lease expiries and terminated backends.
        faults: 1 + run.faults,
        violations: found,
        details: {
          seed,
          byWorkload: run.workload.violations.length,
          byScenario: run.scenario.violations.length,
          expectedCaught: `${mutant.expected.length - missing.length}/${mutant.expected.length}`,
          invariants: [...new Set([...Object.keys(run.workload.byInvariant), ...Object.keys(run.scenario.byInvariant)])]
            .sort()
            .join(' '),
        },
      });
      expect(found).toBeGreaterThan(0);
      expect(missing, describeViolations(run.scenario)).toEqual([]);
    }, 180_000);
  }
});
