import { FAULTS } from './config.js';
import type { SimulationReport } from './run.js';

/** What an answer label of the fault table means, in words a newcomer reads. */
const PLAIN: Readonly<Record<string, string>> = {
  'claim acquired': 'an attempt started',
  'claim in_progress': 'a caller was told to wait for the running attempt',
  'claim replay': 'a caller got the stored result',
  'claim conflict': 'refused as a conflict (nothing ran, nothing disclosed)',
  'complete settled (current_attempt)': 'settled once, by the attempt holding the lease',
  'complete settled (lease_released)': 'a late success settled the unknown operation',
  'complete already_settled (late_success)': 'a late success was recorded, the settled result kept',
  'heartbeat fenced (settled)': 'a stale worker was fenced',
  'reportUnknown recorded (outcome_unknown)': 'the timeout was recorded as unknown, not as a failure',
  'reportUnknown fenced (settled)': 'a stale report was ignored',
  'fail fenced (settled)': 'a stale failure report was ignored',
  'downstream credited': 'money moved',
  'downstream deduplicated': 'the downstream refused to pay twice',
  'reconcile found the payout: not paid again': 'the retry found the payout downstream and did not pay again',
  'run() completed': 'run() answered completed',
  'run() completed (reconciled)': 'run() settled from the downstream record',
  'run() replay': 'run() answered with the stored result',
  'run() unknown (effect_outcome_unknown)': 'run() answered unknown (retried with the same key)',
  'run() unknown (needs_reconciliation)': 'run() refused to re-run without reconciling',
  'run() fenced': 'run() answered fenced (its lease had lapsed; a live caller runs the key again)',
  'run() unknown (reconcile_failed)': 'run() answered unknown: the lookup failed, nothing paid',
  'the lookup timed out too': "the retry's lookup timed out too",
  'held open until a later settlement was polled': 'the settlement stayed uncommitted until the naive poller passed it',
  'held open, no later settlement polled in time': 'the settlement stayed uncommitted, no later one was polled in time',
  'reportUnknown recorded (needs_reconciliation)': 'the budget was spent: dead-lettered, needs reconciliation',
};

const plain = (label: string): string => PLAIN[label] ?? label;

function table(headers: readonly string[], rows: readonly (readonly string[])[], rightFrom = 1): string[] {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  const fmt = (cells: readonly string[]): string =>
    cells
      .map((cell, i) => (i < rightFrom ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0)))
      .join('   ')
      .trimEnd();
  return [fmt(headers), ...rows.map(fmt)];
}

/** The human-readable simulator report (the JSON form is the SimulationReport itself). */
export function formatReport(report: SimulationReport): string {
  const lines: string[] = [];
  const { operations: ops, timing, latency, config } = report;
  lines.push(
    `pg-settle simulate: seed ${report.seed}, ${ops.issued} payouts over ${config.tenants} tenants, ${config.workers} concurrent callers, lease ${config.leaseSeconds}s` +
      (report.unsafeDownstream ? ', UNSAFE downstream (it forgets idempotency keys)' : ''),
  );
  lines.push(
    'Every caller goes through run(); crashes, stalls past the lease, timeouts, duplicate and conflicting retries are injected.',
  );

  if (report.comparison !== null) {
    const { naive, pgSettle } = report.comparison;
    lines.push('');
    lines.push(
      `side by side: the same ${naive.operations} payouts and faults (seed ${report.seed}), the same downstream`,
    );
    const rows: [string, number, number][] = [
      ['double payouts (money moved twice)', naive.doublePayouts, pgSettle.doublePayouts],
      ['downgraded outcomes (completed overwritten)', naive.downgradedOutcomes, pgSettle.downgradedOutcomes],
      ['lost results (paid, no matching completed result)', naive.lostResults, pgSettle.lostResults],
      ['conflicting payloads accepted', naive.conflictingPayloadsAccepted, pgSettle.conflictingPayloadsAccepted],
    ];
    for (const line of table(
      ['', 'naive upsert', 'pg-settle'],
      rows.map(([what, a, b]) => [what, String(a), String(b)]),
    ))
      lines.push(`  ${line}`);
    lines.push(
      '  naive upsert: a keys table written with last-write-wins (look up, mark running, pay, write the outcome).',
    );
    lines.push(
      report.unsafeDownstream
        ? '  The downstream here forgets idempotency keys: pg-settle still pays once after crashes and timeouts (run() reconciles' +
            ' first), but a worker that ignores its lost lease pays again (lease-expiry), and only an idempotent downstream stops that.'
        : '  No double payout relies on two things: pg-settle settles once, and the downstream honours the idempotency key' +
            ' (a worker that ignores its lost lease still calls it). --unsafe-downstream shows both sides without the latter.',
    );
  }

  lines.push('');
  lines.push(
    `time      ${(timing.workloadMs / 1000).toFixed(1)} s for the workload (${timing.throughputOpsPerSec} settled payouts/s; lease lapses are real 1 s waits),` +
      ` ${(timing.checkMs / 1000).toFixed(1)} s to read back and check`,
  );
  lines.push(`outcome   ${ops.completed} completed, ${ops.failed} failed, ${ops.other} unfinished`);
  lines.push(
    `latency   one run() p50 ${latency.run.p50Ms} ms, p99 ${latency.run.p99Ms} ms (${latency.run.count} calls: claim, pay, complete - or waiting for another caller);` +
      ` engine round trips: claim p50 ${latency.claim.p50Ms} ms, settle p50 ${latency.settle.p50Ms} ms, with ${config.workers} callers sharing the machine`,
  );
  const hist = Object.entries(report.attemptsPerOperation.histogram)
    .map(([attempts, count]) => `${count} in ${attempts}`)
    .join(', ');
  lines.push(`attempts  ${hist} (a faulted first attempt needs a second)`);
  lines.push(
    `payouts   ${report.payouts.credited} moved money, ${report.payouts.deduplicated} refused as duplicates by the downstream;` +
      ` the sweeper ran ${report.sweeper.runs} times and ended ${report.sweeper.leasesExpired} lapsed leases`,
  );

  const r = report.reconciliation;
  lines.push(
    `reconcile ${r.needed} needed reconciliation: ${r.resolvedCompleted} resolved completed, ${r.resolvedFailed} resolved failed,` +
      ` ${r.undecided} left undecided`,
  );
  lines.push(
    `          (the reconciler asked the provider in ${r.sweeps} sweeps; ${r.lookupsTimedOut} lookups timed out and were retried)`,
  );

  const { feed, naive } = report.consumers;
  lines.push('');
  lines.push(
    'downstream: a reward worker credits each completed payout once ("settlement completed, then reward credited")',
  );
  const consumerRows: [string, number, number | null][] = [
    ['completed payouts to credit', feed.payouts, naive?.payouts ?? null],
    ['credited', feed.credited, naive?.credited ?? null],
    ['missing (never credited)', feed.missing, naive?.missing ?? null],
    ['credited twice', feed.creditedTwice, naive?.creditedTwice ?? null],
  ];
  const consumerHeaders = naive === null ? ['', 'feed consumer'] : ['', 'feed consumer', 'naive poller'];
  const cells = consumerRows.map(([what, a, b]) => (naive === null ? [what, String(a)] : [what, String(a), String(b)]));
  for (const line of table(consumerHeaders, cells)) lines.push(`  ${line}`);
  lines.push(
    `  feed consumer: settle.consume(), read + credit + ack in one transaction, ${feed.events} outcomes (${feed.failedOutcomes} failed)` +
      ` in ${feed.batches} batches; its processes were killed mid-batch ${feed.kills} times and restarted (${feed.processes} started).`,
  );
  if (naive !== null) {
    lines.push(
      `  naive poller: credits settle.settlements rows with settled_at above its cursor (${naive.polls} polls); ${naive.heldPast}` +
        ' settlements (slow-commit) committed after it had polled a later one: settled_at is stamped before commit.',
    );
  }

  lines.push('');
  lines.push(`invariants (checked on the ${report.engineCalls} engine answers and the read-back database)`);
  for (const invariant of report.check.invariants) {
    const mark = invariant.ok ? 'PASS' : 'FAIL';
    lines.push(
      `  ${mark}  ${invariant.name.padEnd(32)} ${String(invariant.checked).padStart(6)} checked  ${invariant.description}`,
    );
    if (!invariant.ok) {
      for (const violation of invariant.violations) lines.push(`          - ${violation}`);
      if (invariant.violationCount > invariant.violations.length) {
        lines.push(`          ... ${invariant.violationCount - invariant.violations.length} more`);
      }
    }
  }

  lines.push('');
  lines.push('faults: what was injected, and what followed');
  for (const row of report.faults) {
    const summary = FAULTS.find((f) => f.name === row.fault)?.summary ?? '';
    lines.push(`  ${row.fault} (rate ${row.rate}, injected ${row.injected} of ${row.planned} planned): ${summary}`);
    const followed = Object.entries(row.answers)
      .sort(([, a], [, b]) => b - a)
      .map(([what, count]) => `${plain(what)} x${count}`);
    if (followed.length > 0) lines.push(`      ${followed.join('; ')}`);
  }

  if (report.errors.count > 0) {
    lines.push('');
    lines.push(`errors (${report.errors.count})`);
    for (const error of report.errors.first) lines.push(`  - ${error}`);
  }
  lines.push('');
  lines.push(report.ok ? 'RESULT: GREEN - every invariant holds' : 'RESULT: RED - see the failures above');
  return wrapLines(lines.join('\n'), REPORT_WIDTH);
}

/** The report's widest line: a terminal, a CI log or a docs page shows it without scrolling. */
export const REPORT_WIDTH = 120;

/**
 * Wraps every line wider than `width` at spaces. A continuation lines up under the line's last
 * column gap (two or more spaces) in its first half, so a table row's description wraps under
 * the description, and a plain line under its own indent.
 */
export function wrapLines(text: string, width: number): string {
  return text
    .split('\n')
    .flatMap((line) => {
      if (line.length <= width) return [line];
      let indent = /^ */.exec(line)?.[0].length ?? 0;
      for (const gap of line.slice(0, Math.floor(width / 2)).matchAll(/ {2,}(?=\S)/g))
        indent = (gap.index ?? 0) + gap[0].length;
      const out: string[] = [];
      let rest = line;
      let prefix = '';
      while (prefix.length + rest.length > width) {
        const room = width - prefix.length;
        let cut = rest.lastIndexOf(' ', room);
        if (cut <= (prefix === '' ? indent : 0)) cut = rest.indexOf(' ', room);
        if (cut === -1) break;
        out.push(`${prefix}${rest.slice(0, cut)}`.trimEnd());
        rest = rest.slice(cut + 1).trimStart();
        prefix = ' '.repeat(indent);
      }
      out.push(`${prefix}${rest}`);
      return out;
    })
    .join('\n');
}
