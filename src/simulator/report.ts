import type { SimulationReport } from './run.js';

/** The human-readable simulator report (the JSON form is the SimulationReport itself). */
export function formatReport(report: SimulationReport): string {
  const lines: string[] = [];
  const { operations: ops, timing, latency, config } = report;
  lines.push(
    `pg-settle simulate: seed ${report.seed}, ${config.workers} workers, ${ops.issued}/${ops.planned} operations, lease ${config.leaseSeconds}s` +
      (report.unsafeDownstream ? ', UNSAFE downstream (no idempotency)' : ''),
  );
  lines.push('');
  lines.push(
    `workload ${(timing.workloadMs / 1000).toFixed(1)} s, check ${(timing.checkMs / 1000).toFixed(1)} s: ` +
      `${ops.completed} completed, ${ops.failed} failed, ${ops.other} unfinished; ${timing.throughputOpsPerSec} settled ops/s`,
  );
  lines.push(
    `latency  claim p50 ${latency.claim.p50Ms} ms  p99 ${latency.claim.p99Ms} ms (${latency.claim.count} calls); ` +
      `settle p50 ${latency.settle.p50Ms} ms  p99 ${latency.settle.p99Ms} ms (${latency.settle.count} calls)`,
  );
  const hist = Object.entries(report.attemptsPerOperation.histogram)
    .map(([attempts, count]) => `${attempts}:${count}`)
    .join(' ');
  lines.push(`attempts per operation  mean ${report.attemptsPerOperation.mean}, max ${report.attemptsPerOperation.max}  (${hist})`);
  lines.push(
    `payouts  ${report.payouts.credited} credited, ${report.payouts.deduplicated} answered by the idempotent downstream; ` +
      `sweeper ${report.sweeper.runs} runs, ${report.sweeper.leasesExpired} leases expired; ${report.engineCalls} engine answers recorded`,
  );

  lines.push('');
  lines.push('invariants');
  for (const invariant of report.check.invariants) {
    const mark = invariant.ok ? 'PASS' : 'FAIL';
    lines.push(`  ${mark}  ${invariant.name.padEnd(32)} ${String(invariant.checked).padStart(6)} checked  ${invariant.description}`);
    if (!invariant.ok) {
      for (const violation of invariant.violations) lines.push(`          - ${violation}`);
      if (invariant.violationCount > invariant.violations.length) {
        lines.push(`          ... ${invariant.violationCount - invariant.violations.length} more`);
      }
    }
  }

  lines.push('');
  lines.push('faults');
  const header = ['fault', 'rate', 'planned', 'injected', 'what followed'];
  const rows = report.faults.map((row) => [
    row.fault,
    String(row.rate),
    String(row.planned),
    String(row.injected),
    Object.entries(row.answers)
      .map(([what, count]) => `${what} x${count}`)
      .join(', ') || '-',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (i === 4 ? 0 : (r[i]?.length ?? 0)))));
  const fmt = (cells: string[]): string =>
    cells.map((cell, i) => (i === cells.length - 1 ? cell : i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join('  ');
  lines.push(`  ${fmt(header)}`);
  for (const row of rows) lines.push(`  ${fmt(row)}`);

  if (report.errors.count > 0) {
    lines.push('');
    lines.push(`errors (${report.errors.count})`);
    for (const error of report.errors.first) lines.push(`  - ${error}`);
  }
  lines.push('');
  lines.push(report.ok ? 'RESULT: GREEN - every invariant holds' : 'RESULT: RED - see the failures above');
  return lines.join('\n');
}
