// One line per test run for the CI log, from vitest's JSON report:
//   node .ci/vitest-verdict.mjs REPORT.json LABEL SECONDS [--no-skips] [--allow-skip REGEX]
// prints `PASS LABEL: N passed, M skipped, F files in S s` (or FAIL, with the failed tests), lists
// every skipped test's title (their titles name what is missing), and exits 1 when a test failed,
// none ran, or (--no-skips) a test was skipped whose title does not match --allow-skip.
import { readFileSync } from 'node:fs';

const [file, label, seconds, ...flags] = process.argv.slice(2);
if (file === undefined || label === undefined || seconds === undefined) {
  console.error('usage: node .ci/vitest-verdict.mjs REPORT.json LABEL SECONDS [--no-skips] [--allow-skip REGEX]');
  process.exit(2);
}
const noSkips = flags.includes('--no-skips');
const allowIndex = flags.indexOf('--allow-skip');
const allowSkip = allowIndex >= 0 ? new RegExp(flags[allowIndex + 1] ?? '^$') : undefined;

let report;
try {
  report = JSON.parse(readFileSync(file, 'utf8'));
} catch (error) {
  console.log(`FAIL ${label}: no test report (${error instanceof Error ? error.message : String(error)}) after ${seconds} s`);
  process.exit(1);
}

const tests = report.testResults.flatMap((f) =>
  f.assertionResults.map((t) => ({ file: f.name, title: [...t.ancestorTitles, t.title].join(' > '), status: t.status })),
);
const failedFiles = report.testResults.filter((f) => f.status === 'failed' && f.assertionResults.every((t) => t.status !== 'failed'));
const passed = tests.filter((t) => t.status === 'passed');
const failed = tests.filter((t) => t.status === 'failed');
const skipped = tests.filter((t) => t.status !== 'passed' && t.status !== 'failed');
const forbidden = noSkips ? skipped.filter((t) => allowSkip === undefined || !allowSkip.test(t.title)) : [];

const ok = failed.length === 0 && failedFiles.length === 0 && passed.length > 0 && forbidden.length === 0 && report.success !== false;
const counts = `${passed.length} passed, ${failed.length} failed, ${skipped.length} skipped, ${report.testResults.length} files in ${seconds} s`;
for (const t of skipped) console.log(`  skipped: ${t.title}`);
for (const t of failed) console.log(`  failed: ${t.title}`);
for (const f of failedFiles) console.log(`  failed file: ${f.name}: ${(f.message ?? '').split('\n')[0]}`);
for (const t of forbidden) console.log(`  not allowed to skip here: ${t.title}`);
console.log(`${ok ? 'PASS' : 'FAIL'} ${label}: ${counts}`);
process.exit(ok ? 0 : 1);
