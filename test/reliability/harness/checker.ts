import { checkAuditTrail } from './audit-checks.js';
import type { EngineState } from '../../../src/checker/engine-state.js';
import {
  checkDisclosure,
  checkFencing,
  checkMonotonicAnswers,
  checkReplays,
  checkResults,
  checkRetryableFailures,
  checkRevocations,
  checkTimeoutStaysUnknown,
  type KeyHistory,
} from './history-checks.js';
import type { CompletedOp } from './history.js';
import { groupByKey, keyOf, ViolationLog, type Invariant, type Violation } from './invariants.js';

export interface CheckOptions {
  /**
   * True (default) when the history holds every call made against these keys; enables the
   * provenance check (the stored result was proposed by a matching complete of its attempt).
   */
  readonly historyComplete?: boolean;
}

export interface CheckReport {
  readonly valid: boolean;
  readonly violations: readonly Violation[];
  /** Violations per invariant name. */
  readonly byInvariant: Partial<Record<Invariant, number>>;
  readonly keys: number;
  readonly calls: number;
}

/**
 * Checks a history plus the final database state against the invariants of
 * test/reliability/harness/invariants.ts. The final state is judged on its own (audit trail replay,
 * attempts) and against every call of the history.
 */
export function check(ops: readonly CompletedOp[], state: EngineState, options: CheckOptions = {}): CheckReport {
  const log = new ViolationLog();
  checkAuditTrail(state, log);

  const records = new Map(state.operations.map((op) => [keyOf(op), op]));
  const calls = ops.filter((op) => op.op !== 'kill_connection' && op.op !== 'revoke_binding');
  const revocations = ops.filter((op) => op.op === 'revoke_binding' && op.type === 'ok');
  const resolutions = groupByKey(state.audit.filter((row) => row.event === 'resolve' && row.outcome === 'resolved'));
  for (const [k, keyOps] of groupByKey(calls)) {
    const first = keyOps[0];
    if (first === undefined) continue;
    const resolution = resolutions.get(k)?.at(-1);
    const h: KeyHistory = {
      ref: { tenant: first.tenant, key: first.key },
      ops: keyOps,
      record: records.get(k),
      complete: options.historyComplete ?? true,
      ...(resolution?.statusAfter === 'completed' || resolution?.statusAfter === 'failed'
        ? { resolved: { status: resolution.statusAfter, attempt: resolution.attempt } }
        : {}),
    };
    const redriven = keyOps.some((op) => op.op === 'redrive' && op.type !== 'fail');
    checkDisclosure(h, log);
    checkResults(h, log);
    checkReplays(h, log);
    checkFencing(h, log, redriven);
    checkRetryableFailures(h, log, redriven);
    checkRevocations(h, revocations, log);
    checkTimeoutStaysUnknown(
      h,
      state.attempts.filter((a) => keyOf(a) === k),
      log,
    );
    if (!redriven) checkMonotonicAnswers(h, log);
  }

  const byInvariant: Partial<Record<Invariant, number>> = {};
  for (const v of log.violations) byInvariant[v.invariant] = (byInvariant[v.invariant] ?? 0) + 1;
  return {
    valid: log.violations.length === 0,
    violations: log.violations,
    byInvariant,
    keys: new Set([...records.keys(), ...calls.map(keyOf)]).size,
    calls: calls.length,
  };
}

/** A readable summary of the first violations, for test failure messages. */
export function describeViolations(report: CheckReport, limit = 20): string {
  const lines = report.violations.slice(0, limit).map((v) => `[${v.invariant}] ${v.tenant}/${v.key}: ${v.message}`);
  if (report.violations.length > limit) lines.push(`... and ${report.violations.length - limit} more`);
  return lines.join('\n');
}
