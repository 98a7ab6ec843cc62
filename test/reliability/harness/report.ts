import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FIGURES_FILE_ENV, type ScenarioFigures } from './figures.js';

/**
 * Runs the reliability suite (vitest project `reliability`) and prints the figures for
 * docs/reliability.md: per test file the tests passed / failed / skipped, and per scenario the
 * operations, faults injected and violations found that the tests recorded (figures.ts).
 *
 *   npx tsx test/reliability/harness/report.ts                    # the bounded suite, as CI runs it
 *   RELIABILITY_FAILOVER=1 npx tsx test/reliability/harness/report.ts   # with the heavy failover run
 *   RELIABILITY_SOAK=1 RELIABILITY_OPS=200000 npx tsx test/reliability/harness/report.ts   # a long soak
 *   npx tsx test/reliability/harness/report.ts test/reliability/failover.test.ts   # a subset
 *
 * Exits 1 when a test failed.
 */

interface VitestJson {
  numTotalTests: number;
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests?: number;
  testResults: {
    name: string;
    startTime: number;
    endTime: number;
    assertionResults: { status: string; fullName: string; failureMessages?: string[] }[];
  }[];
}

function main(): number {
  const root = process.cwd();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'pg-settle-report-'));
  const figuresFile = path.join(dir, 'figures.jsonl');
  const jsonFile = path.join(dir, 'vitest.json');
  const started = Date.now();
  const vitest = path.join(root, 'node_modules', '.bin', 'vitest');
  const run = spawnSync(
    vitest,
    ['run', '--project', 'reliability', '--reporter=json', `--outputFile=${jsonFile}`, ...process.argv.slice(2)],
    { cwd: root, env: { ...process.env, [FIGURES_FILE_ENV]: figuresFile }, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const seconds = (Date.now() - started) / 1000;
  try {
    if (!existsSync(jsonFile)) {
      console.error(`vitest wrote no report (exit ${run.status}, signal ${run.signal})`);
      return 1;
    }
    const result = JSON.parse(readFileSync(jsonFile, 'utf8')) as VitestJson;
    const figures = existsSync(figuresFile)
      ? readFileSync(figuresFile, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => JSON.parse(l) as ScenarioFigures)
      : [];
    printReport(result, figures, seconds, root);
    return result.numFailedTests > 0 || run.status !== 0 ? 1 : 0;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function printReport(result: VitestJson, figures: readonly ScenarioFigures[], seconds: number, root: string): void {
  const flags = [
    'RELIABILITY_FAILOVER',
    'RELIABILITY_SOAK',
    'RELIABILITY_OPS',
    'RELIABILITY_SEED',
    'RELIABILITY_MERGE_RUNS',
    'MODEL_RUNS',
    'MODEL_STEPS',
    'MODEL_SEED',
    'MODEL_MUTANT_RUNS',
  ]
    .filter((name) => (process.env[name] ?? '') !== '')
    .map((name) => `${name}=${process.env[name]}`);
  const heavy = flags.length === 0 ? '' : ` (${flags.join(' ')})`;
  console.log(
    `pg-settle reliability suite${heavy}, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC: ${result.numPassedTests} passed, ${result.numFailedTests} failed, ` +
      `${result.numPendingTests + (result.numTodoTests ?? 0)} skipped/todo, of ${result.numTotalTests} tests, in ${seconds.toFixed(0)} s wall clock`,
  );
  console.log('');
  console.log('| test file | passed | failed | skipped | seconds |');
  console.log('|---|---:|---:|---:|---:|');
  for (const file of [...result.testResults].sort((a, b) => a.name.localeCompare(b.name))) {
    const count = (status: string): number => file.assertionResults.filter((a) => a.status === status).length;
    const skipped = file.assertionResults.length - count('passed') - count('failed');
    console.log(
      `| ${path.relative(root, file.name)} | ${count('passed')} | ${count('failed')} | ${skipped} | ${((file.endTime - file.startTime) / 1000).toFixed(1)} |`,
    );
  }
  console.log('');
  if (figures.length > 0) {
    console.log('| scenario | operations | faults injected | violations found | details |');
    console.log('|---|---:|---:|---:|---|');
    const total = { operations: 0, faults: 0, violations: 0 };
    const caught = { mutants: 0, violations: 0 };
    // Tests append in the order they finish (files run in parallel): sort for a stable table.
    for (const f of [...figures].sort((a, b) => a.scenario.localeCompare(b.scenario))) {
      total.operations += f.operations;
      total.faults += f.faults;
      // Violations found against a deliberately broken engine are the expected finding, not a
      // violation of the engine under test: counted apart.
      if (isMutant(f.scenario)) {
        caught.mutants += 1;
        caught.violations += f.violations;
      } else {
        total.violations += f.violations;
      }
      const details = Object.entries(f.details ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(', ');
      console.log(`| ${f.scenario} | ${f.operations} | ${f.faults} | ${f.violations} | ${details} |`);
    }
    const mutants =
      caught.mutants === 0
        ? ''
        : `violations outside ${caught.mutants} mutants (found against them: ${caught.violations})`;
    console.log(`| **total** | ${total.operations} | ${total.faults} | ${total.violations} | ${mutants} |`);
  }
  const failures = result.testResults.flatMap((f) => f.assertionResults.filter((a) => a.status === 'failed'));
  for (const failure of failures) {
    console.log(
      `\nFAILED: ${failure.fullName}\n${(failure.failureMessages ?? []).join('\n').split('\n').slice(0, 8).join('\n')}`,
    );
  }
}

/** A scenario run against a mutated engine (test/reliability/mutants.test.ts), not its control. */
function isMutant(scenario: string): boolean {
  return scenario.startsWith('mutants/') && scenario !== 'mutants/control';
}

process.exitCode = main();
