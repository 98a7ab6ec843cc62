import type { AttemptRow, AuditRow, EngineState, OperationRow } from '../../../src/checker/engine-state.js';
import { isSnapshotRead } from '../../../src/checker/invariants.js';
import type { StatusName } from './history.js';
import { groupByKey, keyOf, rank, type ViolationLog } from './invariants.js';

/** What replaying one key's audit trail says the record must be. */
interface Replay {
  status: StatusName | null;
  attempt: number;
  /** Attempt holding the lease, or null. */
  lease: number | null;
  settlements: number;
}

/**
 * Replays every key's audit trail (audit_id order) and checks each transition, then compares
 * the end of the trail with the stored operation and its attempts.
 */
export function checkAuditTrail(state: EngineState, log: ViolationLog): void {
  const operations = new Map(state.operations.map((op) => [keyOf(op), op]));
  const attempts = groupByKey(state.attempts);
  const trails = groupByKey(state.audit);
  for (const [k, op] of operations) {
    const replay = replayTrail(trails.get(k) ?? [], log);
    checkEndOfTrail(op, replay, attempts.get(k) ?? [], log);
  }
  for (const [k, rows] of trails) {
    const last = rows[rows.length - 1];
    // Calls refused before anything existed (a revoked binding on a never-claimed key) leave
    // evidence rows without an operation.
    if (
      !operations.has(k) &&
      last !== undefined &&
      last.event !== 'purge' &&
      !rows.every((row) => row.outcome === 'refused')
    ) {
      log.add('audit-continuity', last, `the audit trail ends in ${last.statusAfter} but no operation is stored`);
    }
  }
}

function replayTrail(rows: readonly AuditRow[], log: ViolationLog): Replay {
  const r: Replay = { status: null, attempt: 0, lease: null, settlements: 0 };
  let seen = new Set<string | null>();
  let prev: AuditRow | undefined;
  for (const row of rows) {
    if (row.event === 'purge') {
      Object.assign(r, { status: null, attempt: 0, lease: null, settlements: 0 });
      seen = new Set();
      prev = row;
      continue;
    }
    if (isSnapshotRead(row)) {
      // Stale is allowed; a status the trail never reached is not.
      if (!seen.has(row.statusBefore) && !(row.statusBefore === null && row.outcome === 'refused')) {
        log.add(
          'audit-continuity',
          row,
          `audit ${row.auditId} (claim ${row.outcome}) read status ${row.statusBefore}, which the trail never reached`,
          [row.auditId],
        );
      }
      continue;
    }
    // A completed resolution also logs its settlement on its own attempt (complete:settled,
    // reason resolved) right after the resolve row: one settlement, not two.
    if (
      row.event === 'complete' &&
      row.outcome === 'settled' &&
      prev?.event === 'resolve' &&
      prev.outcome === 'resolved' &&
      prev.statusAfter === 'completed' &&
      row.attempt === prev.attempt &&
      reasonOf(row) === 'resolved'
    ) {
      prev = row;
      continue;
    }
    // Every transition starts where the one before it ended (a claim that first ends a lapsed
    // lease writes `expire`, then its own row from the status the expiry left).
    if (row.statusBefore !== r.status) {
      log.add(
        'audit-continuity',
        row,
        `audit ${row.auditId} (${row.event} ${row.outcome}) starts from ${row.statusBefore}, the trail was at ${r.status}`,
        [row.auditId],
      );
    }
    checkTransition(row, r, log);
    r.status = row.statusAfter;
    seen.add(r.status);
    prev = row;
  }
  return r;
}

function reasonOf(row: AuditRow): unknown {
  return typeof row.detail === 'object' && row.detail !== null
    ? (row.detail as { reason?: unknown }).reason
    : undefined;
}

function checkTransition(row: AuditRow, r: Replay, log: ViolationLog): void {
  const { statusBefore: before, statusAfter: after } = row;
  const what = `audit ${row.auditId} (${row.event} ${row.outcome}, attempt ${row.attempt})`;
  if (before !== null && after !== null && rank(after) < rank(before)) {
    const redrive = row.event === 'redrive' && before === 'failed' && after === 'pending';
    if (!redrive) log.add('status-monotonic', row, `${what} moved ${before} -> ${after}`, [row.auditId]);
  }
  const unchanged = (): void => {
    if (before !== after)
      log.add('superseded-no-effect', row, `${what} changed the status ${before} -> ${after}`, [row.auditId]);
  };
  switch (row.event) {
    case 'claim':
      if (row.outcome === 'acquired') {
        if (r.lease !== null)
          log.add('lease-exclusive', row, `${what} while attempt ${r.lease} held the lease`, [row.auditId]);
        if (row.attempt !== r.attempt + 1)
          log.add('lease-exclusive', row, `${what} opened after attempt ${r.attempt}`, [row.auditId]);
        r.attempt = row.attempt ?? r.attempt;
        r.lease = row.attempt;
      } else if (row.outcome !== 'failed' && row.outcome !== 'unknown') {
        // failed and unknown (a spent budget dead-lettered at this claim) repeat the transition
        // of the expire row written just before them.
        unchanged();
      }
      return;
    case 'expire':
      // The engine ends a lease only once it lapsed, judged by the same clock reading it writes
      // as the row's time (claim and expire_leases alike).
      if (row.endedLiveLease)
        log.add('lease-exclusive', row, `${what} ended the lease of attempt ${r.lease} before it lapsed`, [
          row.auditId,
        ]);
      r.lease = null;
      return;
    case 'heartbeat':
      unchanged();
      return;
    case 'revoke':
      // An operation reserved under a revoked binding generation (settle.revoke_binding):
      // its lease and live attempt end; the status rises to conflict or stays.
      r.lease = null;
      return;
    case 'redrive': {
      // attempts_exhausted re-opens failed as pending; needs_reconciliation keeps unknown/conflict.
      const kept = before === after && (before === 'unknown' || before === 'conflict');
      if (!kept && (before !== 'failed' || after !== 'pending'))
        log.add('status-monotonic', row, `${what} moved ${before} -> ${after}`, [row.auditId]);
      return;
    }
    case 'complete':
      checkComplete(row, r, what, log, unchanged);
      return;
    case 'resolve':
      checkResolve(row, r, what, log, unchanged);
      return;
    case 'fail':
    case 'report_unknown':
      if (row.outcome === 'recorded' || row.outcome === 'settled') {
        if (row.attempt !== r.lease) {
          log.add('superseded-no-effect', row, `${what} was merged while attempt ${r.lease} held the lease`, [
            row.auditId,
          ]);
        }
        r.lease = null;
      } else if (row.outcome === 'conflict' && row.attempt !== null && row.attempt === r.lease) {
        // A mismatched observation of the lease holder ends its attempt: the lease
        // goes, running becomes pending, nothing else changes.
        r.lease = null;
        if (before !== after && !(before === 'running' && after === 'pending')) {
          log.add('superseded-no-effect', row, `${what} changed the status ${before} -> ${after}`, [row.auditId]);
        }
      } else {
        unchanged();
      }
      return;
    default:
      log.add('audit-continuity', row, `${what}: unknown audit event`, [row.auditId]);
  }
}

function checkComplete(row: AuditRow, r: Replay, what: string, log: ViolationLog, unchanged: () => void): void {
  const { statusBefore: before, statusAfter: after } = row;
  if (row.outcome === 'settled') {
    r.settlements += 1;
    if (r.settlements > 1) log.add('single-settlement', row, `${what} is settlement #${r.settlements}`, [row.auditId]);
    if (after !== 'completed') log.add('audit-continuity', row, `${what} settled into ${after}`, [row.auditId]);
    r.lease = null;
    return;
  }
  if (row.outcome === 'conflict') {
    const raised = before !== null && rank(before) < rank('conflict');
    if (after !== (raised ? 'conflict' : before)) {
      log.add('mismatch-never-settles', row, `${what} moved ${before} -> ${after}`, [row.auditId]);
    }
    // The lease holder's mismatched success ends its attempt and releases the lease.
    if (row.attempt !== null && row.attempt === r.lease) r.lease = null;
    return;
  }
  unchanged();
}

/**
 * settle.resolve: only an unknown or conflict operation is resolved. completed
 * settles through an attempt epoch of its own (N + 1), ending a held lease; failed never while
 * an attempt holds the lease. already_final (or a refusal) changes nothing.
 */
function checkResolve(row: AuditRow, r: Replay, what: string, log: ViolationLog, unchanged: () => void): void {
  if (row.outcome !== 'resolved') {
    unchanged();
    return;
  }
  const { statusBefore: before, statusAfter: after } = row;
  if (before !== 'unknown' && before !== 'conflict')
    log.add('resolution-final', row, `${what} resolved a ${before} operation`, [row.auditId]);
  if (after === 'completed') {
    r.settlements += 1;
    if (r.settlements > 1) log.add('single-settlement', row, `${what} is settlement #${r.settlements}`, [row.auditId]);
    if (row.attempt !== r.attempt + 1)
      log.add('lease-exclusive', row, `${what} settled through attempt ${row.attempt}, the trail was at ${r.attempt}`, [
        row.auditId,
      ]);
    r.attempt = row.attempt ?? r.attempt;
    r.lease = null;
  } else if (after === 'failed') {
    if (r.lease !== null)
      log.add('timeout-stays-unknown', row, `${what} resolved failed while attempt ${r.lease} held the lease`, [
        row.auditId,
      ]);
  } else {
    log.add('resolution-final', row, `${what} resolved into ${after}`, [row.auditId]);
  }
}

function checkEndOfTrail(op: OperationRow, r: Replay, attempts: readonly AttemptRow[], log: ViolationLog): void {
  if (r.status !== op.status)
    log.add('audit-continuity', op, `the audit trail ends in ${r.status}, the record is ${op.status}`);
  if (r.attempt !== op.attempt)
    log.add('audit-continuity', op, `the audit trail opened ${r.attempt} attempts, the record has ${op.attempt}`);
  if ((r.lease !== null) !== op.leaseHeld) {
    log.add(
      'lease-exclusive',
      op,
      `the audit trail says lease ${r.lease === null ? 'free' : `held by ${r.lease}`}, the record says ${op.leaseHeld ? 'held' : 'free'}`,
    );
  }
  const completed = op.status === 'completed';
  if (r.settlements !== (completed ? 1 : 0)) {
    log.add('single-settlement', op, `${r.settlements} settlements audited for a ${op.status} operation`);
  }
  const settled = attempts.filter((a) => a.settled);
  if (settled.length !== (completed ? 1 : 0) || (completed && settled[0]?.attempt !== op.settledAttempt)) {
    log.add(
      'single-settlement',
      op,
      `settled attempts [${settled.map((a) => a.attempt).join(', ')}], record settled_attempt ${op.settledAttempt}, status ${op.status}`,
    );
  }
  // Only a spent budget, or a final failure after an attempt that may have taken effect
  // (recorded on its attempt, the operation left unknown), dead-letters early.
  const finalFailure = attempts.some((a) => a.observation === 'failed' && a.retryable === false);
  if (op.deadLettered && op.attempt < op.maxAttempts && !finalFailure) {
    log.add('retryable-failure-reopens', op, `dead-lettered after ${op.attempt} of ${op.maxAttempts} attempts`);
  }
  const numbers = attempts.map((a) => a.attempt).join(',');
  const expected = Array.from({ length: op.attempt }, (_, i) => i + 1).join(',');
  if (numbers !== expected) log.add('lease-exclusive', op, `attempt rows [${numbers}], expected [${expected}]`);
}
