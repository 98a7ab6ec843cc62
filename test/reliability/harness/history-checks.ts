import { sameJson } from './canonical-json.js';
import type { AttemptRow } from '../../../src/checker/engine-state.js';
import type { OperationRow } from '../../../src/checker/engine-state.js';
import type { Answer, CompletedOp, OpArgs } from './history.js';
import { rank, type ViolationLog } from './invariants.js';

/** One key's calls and its stored record (undefined when none is stored). */
export interface KeyHistory {
  readonly ref: { tenant: string; key: string };
  readonly ops: readonly CompletedOp[];
  readonly record: OperationRow | undefined;
  /** False when the history may miss calls (then provenance checks are skipped). */
  readonly complete: boolean;
  /**
   * The operator's verified outcome (settle.resolve, from the audit trail), when one was
   * recorded: a completed resolution settles through its own attempt, proposed by no complete;
   * a failed one is an explicit assertion that no attempt took effect.
   */
  readonly resolved?: { readonly status: 'completed' | 'failed'; readonly attempt: number | null };
}

const OBSERVATIONS = new Set(['complete', 'fail', 'report_unknown']);

/** Whether a call presents the reserved lock of `record`. */
export function presentsLock(op: CompletedOp, record: OperationRow): boolean {
  const b = op.args.binding;
  if (b === undefined) return true;
  const scopes = [...new Set(b.scopes)].sort();
  const sameBinding =
    b.principal === record.principal &&
    b.generation === record.generation &&
    scopes.join('\u0000') === [...record.scopes].join('\u0000');
  if (!sameBinding) return false;
  if (op.op === 'claim' || op.op === 'get') return sameJson(op.args.request, record.request);
  if (OBSERVATIONS.has(op.op)) return op.args.fingerprint === record.fingerprint;
  return true;
}

function disclosed(answer: Answer): string[] {
  const fields: (keyof Answer)[] = [
    'status',
    'attempt',
    'settledAttempt',
    'result',
    'error',
    'fingerprint',
    'leaseToken',
    'deadLettered',
  ];
  return fields.filter((f) => answer[f] !== undefined && answer[f] !== null);
}

const okAnswers = (ops: readonly CompletedOp[]): (CompletedOp & { answer: Answer })[] =>
  ops.filter((op): op is CompletedOp & { answer: Answer } => op.type === 'ok' && op.answer !== undefined);

/** Conflicts and invalid tokens disclose nothing; a mismatched lock only ever gets those. */
export function checkDisclosure(h: KeyHistory, log: ViolationLog): void {
  for (const op of okAnswers(h.ops)) {
    const a = op.answer;
    const blind =
      a.outcome === 'conflict' ||
      a.outcome === 'refused' ||
      (a.outcome === 'fenced' && (a.reason === 'invalid_token' || a.reason === 'binding_revoked'));
    const leaks = blind ? disclosed(a) : [];
    if (leaks.length > 0) {
      log.add(
        'conflict-discloses-nothing',
        h.ref,
        `${op.op} #${op.id} answered ${a.outcome} with ${leaks.join(', ')}`,
        [op.id],
      );
    }
    if (h.record === undefined || !(op.op === 'claim' || op.op === 'get' || OBSERVATIONS.has(op.op))) continue;
    const matches = presentsLock(op, h.record);
    // A read of a key that did not exist yet when it ran is not_found, whatever it presented.
    if (!matches && !blind && !(op.op === 'get' && a.outcome === 'not_found')) {
      log.add(
        op.op === 'get' ? 'read-gated-by-lock' : 'mismatch-never-settles',
        h.ref,
        `${op.op} #${op.id} with a mismatched lock answered ${a.outcome}`,
        [op.id],
      );
    }
    if (matches && a.outcome === 'conflict') {
      log.add('spurious-conflict', h.ref, `${op.op} #${op.id} presented the reserved lock and got conflict`, [op.id]);
    }
  }
}

/** Results seen, acknowledged settlements and the provenance of the stored result. */
export function checkResults(h: KeyHistory, log: ViolationLog): void {
  const rec = h.record;
  const oks = okAnswers(h.ops);
  for (const op of oks) {
    const a = op.answer;
    const carriesResult = a.result !== undefined && a.result !== null;
    if (carriesResult && (rec?.status !== 'completed' || !sameJson(a.result, rec.result))) {
      log.add(
        'result-immutable',
        h.ref,
        `${op.op} #${op.id} answered result ${JSON.stringify(a.result)}, final ${rec?.resultText ?? 'none'}`,
        [op.id],
      );
    }
    if (carriesResult && a.settledAttempt != null && a.settledAttempt !== rec?.settledAttempt) {
      log.add(
        'result-immutable',
        h.ref,
        `${op.op} #${op.id} answered settled attempt ${a.settledAttempt}, final ${rec?.settledAttempt}`,
        [op.id],
      );
    }
    if (op.op === 'complete' && acknowledgesSettlement(op.args, a)) {
      const kept =
        rec?.status === 'completed' && rec.settledAttempt === op.args.attempt && sameJson(op.args.result, rec.result);
      if (!kept) {
        log.add(
          'acknowledged-completion-durable',
          h.ref,
          `complete #${op.id} (attempt ${op.args.attempt}) was acknowledged ${a.outcome}; final ${rec?.status ?? 'missing'} attempt ${rec?.settledAttempt}`,
          [op.id],
        );
      }
    }
  }
  const settledAcks = oks.filter((op) => op.op === 'complete' && op.answer.outcome === 'settled');
  if (settledAcks.length > 1) {
    log.add(
      'single-settlement',
      h.ref,
      `${settledAcks.length} completes answered settled`,
      settledAcks.map((op) => op.id),
    );
  }
  const byResolution = h.resolved?.status === 'completed' && h.resolved.attempt === rec?.settledAttempt;
  if (rec?.status === 'completed' && h.complete && !byResolution) {
    const proposals = h.ops.filter(
      (op) => op.op === 'complete' && op.args.attempt === rec.settledAttempt && sameJson(op.args.result, rec.result),
    );
    if (proposals.length === 0) {
      log.add(
        'result-immutable',
        h.ref,
        `the stored result ${rec.resultText} was never proposed by attempt ${rec.settledAttempt}`,
      );
    } else if (!proposals.some((op) => presentsLock(op, rec))) {
      log.add(
        'mismatch-never-settles',
        h.ref,
        `the stored result came from a complete with a mismatched lock`,
        proposals.map((op) => op.id),
      );
    }
  }
}

function acknowledgesSettlement(args: OpArgs, a: Answer): boolean {
  return (
    a.outcome === 'settled' ||
    (a.outcome === 'duplicate' && a.settledAttempt != null && a.settledAttempt === args.attempt)
  );
}

/**
 * Retries after a settlement replay it; retries after a final failure replay it (or the
 * success that later lifted it).
 */
export function checkReplays(h: KeyHistory, log: ViolationLog): void {
  const rec = h.record;
  if (rec === undefined) return;
  const oks = okAnswers(h.ops);
  const settledAt = Math.min(
    ...oks
      .filter((op) => op.answer.status === 'completed' || op.answer.outcome === 'replay')
      .map((op) => op.completedAt),
  );
  const finalFailures = oks.filter(
    (op) => op.op === 'fail' && op.answer.outcome === 'settled' && op.answer.reason === 'final_failure',
  );
  for (const op of oks) {
    if (op.op !== 'claim' || !presentsLock(op, rec)) continue;
    const a = op.answer;
    if (op.invokedAt > settledAt && (a.outcome !== 'replay' || !sameJson(a.result, rec.result))) {
      log.add('success-replays', h.ref, `claim #${op.id} after the settlement answered ${a.outcome}`, [op.id]);
    }
    for (const failure of finalFailures) {
      if (op.invokedAt <= failure.completedAt) continue;
      const replaysFailure = a.outcome === 'failed' && sameJson(a.error, failure.args.error);
      if (!replaysFailure && !(a.outcome === 'replay' && rec.status === 'completed')) {
        log.add(
          'failure-replays',
          h.ref,
          `claim #${op.id} after final failure #${failure.id} answered ${a.outcome} ${JSON.stringify(a.error ?? null)}`,
          [failure.id, op.id],
        );
      }
    }
  }
}

const RELEASES: Record<string, readonly string[]> = {
  fail: ['recorded', 'settled'],
  report_unknown: ['recorded'],
  complete: ['settled'],
};

/** Stale attempts (superseded, released or settled) are fenced. */
export function checkFencing(h: KeyHistory, log: ViolationLog, redriven: boolean): void {
  const oks = okAnswers(h.ops);
  const acquired = oks.filter((op) => op.op === 'claim' && op.answer.outcome === 'acquired');
  const released = oks.filter((op) => RELEASES[op.op]?.includes(op.answer.outcome) === true);
  const terminalAt = redriven
    ? Infinity
    : Math.min(
        ...oks
          .filter((op) => op.answer.status === 'completed' || op.answer.status === 'failed')
          .map((op) => op.completedAt),
      );
  for (const op of oks) {
    if (op.op !== 'heartbeat' && op.op !== 'fail' && op.op !== 'report_unknown') continue;
    const attempt = op.args.attempt;
    const t = op.invokedAt;
    const superseded = acquired.some((c) => (c.answer.attempt ?? 0) > (attempt ?? 0) && c.completedAt < t);
    const ownRelease = released.some(
      (r) => r.args.attempt === attempt && r.args.leaseToken === op.args.leaseToken && r.completedAt < t,
    );
    if (!superseded && !ownRelease && terminalAt >= t) continue;
    const merged =
      op.op === 'heartbeat' ? op.answer.outcome === 'extended' : ['recorded', 'settled'].includes(op.answer.outcome);
    if (merged) {
      const why = superseded ? 'superseded' : ownRelease ? 'released its lease' : 'settled';
      log.add(
        'stale-fenced',
        h.ref,
        `${op.op} #${op.id} of attempt ${attempt} (${why}) answered ${op.answer.outcome}`,
        [op.id],
      );
    }
  }
  const seen = new Map<number, number>();
  for (const c of acquired) {
    const n = c.answer.attempt ?? -1;
    const other = seen.get(n);
    if (other !== undefined) log.add('lease-exclusive', h.ref, `attempt ${n} acquired twice`, [other, c.id]);
    seen.set(n, c.id);
  }
}

/**
 * Answers never go down the lattice in real time (an answer returned before another call was
 * invoked bounds that call's answer from below), and the final record is at least as high as
 * every answer. Skipped for keys that were redriven.
 */
export function checkMonotonicAnswers(h: KeyHistory, log: ViolationLog): void {
  const withStatus = okAnswers(h.ops).filter((op) => op.answer.status != null);
  const byCompletion = [...withStatus].sort((x, y) => x.completedAt - y.completedAt);
  const byInvoke = [...withStatus].sort((x, y) => x.invokedAt - y.invokedAt);
  let i = 0;
  let floor = 0;
  let floorOp: (CompletedOp & { answer: Answer }) | undefined;
  for (const op of byInvoke) {
    for (; i < byCompletion.length && (byCompletion[i]?.completedAt ?? Infinity) < op.invokedAt; i += 1) {
      const prior = byCompletion[i];
      if (prior?.answer.status != null && rank(prior.answer.status) > floor) {
        floor = rank(prior.answer.status);
        floorOp = prior;
      }
    }
    const status = op.answer.status;
    if (status != null && rank(status) < floor && floorOp !== undefined) {
      log.add(
        'status-monotonic',
        h.ref,
        `${op.op} #${op.id} answered ${status} after #${floorOp.id} answered ${floorOp.answer.status}`,
        [floorOp.id, op.id],
      );
    }
  }
  const top = withStatus.reduce<(CompletedOp & { answer: Answer }) | undefined>(
    (best, op) =>
      best === undefined || rank(op.answer.status ?? 'pending') > rank(best.answer.status ?? 'pending') ? op : best,
    undefined,
  );
  if (top?.answer.status != null && (h.record === undefined || rank(h.record.status) < rank(top.answer.status))) {
    log.add(
      'status-monotonic',
      h.ref,
      `#${top.id} answered ${top.answer.status}, the final record is ${h.record?.status ?? 'missing'}`,
      [top.id],
    );
  }
}

/**
 * A retryable failure of an attempt that had budget left is `recorded`, never a final
 * `failed`: the seed's retry-after-failure bug (a failed settlement treated as terminal).
 * Skipped for redriven keys (a redrive changes the budget).
 */
export function checkRetryableFailures(h: KeyHistory, log: ViolationLog, redriven: boolean): void {
  const rec = h.record;
  if (rec === undefined || redriven) return;
  for (const op of okAnswers(h.ops)) {
    if (op.op !== 'fail' || op.args.retryable !== true || op.answer.status !== 'failed') continue;
    if ((op.args.attempt ?? Infinity) < rec.maxAttempts && ['settled', 'recorded'].includes(op.answer.outcome)) {
      log.add(
        'retryable-failure-reopens',
        h.ref,
        `fail #${op.id} (retryable, attempt ${op.args.attempt} of ${rec.maxAttempts}) answered ${op.answer.outcome} with status failed`,
        [op.id],
      );
    }
  }
}

const REVOKED_ANSWERS = new Set(['refused', 'conflict']);

/**
 * Calls that start after a settle.revoke_binding returned, presenting that principal's binding
 * in that tenant with a generation below the floor, are refused (reason binding_revoked) or
 * answered like a stranger (conflict, invalid_token): never acquired, extended, settled,
 * replayed, recorded or read.
 */
export function checkRevocations(h: KeyHistory, revocations: readonly CompletedOp[], log: ViolationLog): void {
  for (const revoke of revocations) {
    const floor = revoke.args.binding;
    if (revoke.tenant !== h.ref.tenant || floor === undefined) continue;
    for (const op of okAnswers(h.ops)) {
      const b = op.args.binding;
      if (op.invokedAt <= revoke.completedAt || b === undefined || b.principal !== floor.principal) continue;
      if (BigInt(b.generation) >= BigInt(floor.generation)) continue;
      const a = op.answer;
      const refused =
        REVOKED_ANSWERS.has(a.outcome) ||
        (a.outcome === 'fenced' && (a.reason === 'binding_revoked' || a.reason === 'invalid_token'));
      if (!refused) {
        log.add(
          'revoked-never-settles',
          h.ref,
          `${op.op} #${op.id} presented generation ${b.generation} below the floor ${floor.generation} (revoked by #${revoke.id}) and answered ${a.outcome}`,
          [revoke.id, op.id],
        );
      }
    }
  }
}

/**
 * Timeout means unknown: `failed` is a committed failure
 * only, answered while no attempt may have taken effect. An answer saying failed (a claim
 * outcome, or the status after an observation) with current attempt N is judged against
 * attempts 1..N of the final state (attempt observations are immutable once terminal): every one
 * of them recorded a failure — a final failure after an attempt that reported unknown, lapsed or
 * conflicted does not make it failed — and no earlier answer showed the status unknown or
 * conflict (the lattice never goes back below them). The final state is judged the same way.
 * A failed resolution (settle.resolve) is the operator's verdict on every attempt up to
 * its own: from the moment it was invoked (or, when the history does not hold the call, always)
 * those attempts count as failed whatever they had observed (an attempt that saw a conflicting
 * completion keeps that observation).
 */
export function checkTimeoutStaysUnknown(h: KeyHistory, attempts: readonly AttemptRow[], log: ViolationLog): void {
  const verdict = h.resolved?.status === 'failed' ? h.resolved : undefined;
  const verdictCall = h.ops.find(
    (op) =>
      op.op === 'resolve' && op.type === 'ok' && op.answer?.outcome === 'resolved' && op.answer.status === 'failed',
  );
  const verdictFrom = verdict === undefined ? Infinity : (verdictCall?.invokedAt ?? -Infinity);
  const committedUpTo = (n: number, at = Infinity): boolean => {
    const upTo = attempts.filter((a) => a.attempt <= n);
    const judged = (attempt: number): boolean =>
      verdict !== undefined && at >= verdictFrom && attempt <= (verdict.attempt ?? Infinity);
    return upTo.length > 0 && upTo.every((a) => a.observation === 'failed' || judged(a.attempt));
  };
  const open = (n: number): string =>
    attempts
      .filter((a) => a.attempt <= n && a.observation !== 'failed')
      .map((a) => a.attempt)
      .join(', ');
  // The first answer that showed unknown or conflict: a call invoked after it returned is
  // ordered after it, and the status can no longer be failed.
  let possibleEffect: { id: number; completedAt: number } | undefined;
  for (const op of [...h.ops].sort((x, y) => x.completedAt - y.completedAt)) {
    const a = op.answer;
    if (op.type !== 'ok' || a === undefined) continue;
    const saysFailed =
      (op.op === 'claim' && a.outcome === 'failed') || (OBSERVATIONS.has(op.op) && a.status === 'failed');
    if (saysFailed && typeof a.attempt === 'number') {
      if (!committedUpTo(a.attempt, op.completedAt)) {
        log.add(
          'timeout-stays-unknown',
          h.ref,
          `${op.op} answered failed at attempt ${a.attempt}, but attempts ${open(a.attempt)} may have taken effect`,
          [op.id],
        );
      } else if (
        possibleEffect !== undefined &&
        op.invokedAt > possibleEffect.completedAt &&
        h.resolved?.status !== 'failed'
      ) {
        log.add(
          'timeout-stays-unknown',
          h.ref,
          `${op.op} answered failed after #${possibleEffect.id} showed the status unknown or conflict`,
          [possibleEffect.id, op.id],
        );
      }
    }
    if (a.status === 'unknown' || a.status === 'conflict')
      possibleEffect ??= { id: op.id, completedAt: op.completedAt };
  }
  const record = h.record;
  if (record?.status === 'failed' && !committedUpTo(record.attempt)) {
    log.add(
      'timeout-stays-unknown',
      h.ref,
      `final status failed, but attempts ${open(record.attempt)} may have taken effect`,
    );
  }
}
