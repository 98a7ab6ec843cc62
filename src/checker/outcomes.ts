import type { AuditRow } from './engine-state.js';
import { byAuditId, isSnapshotRead } from './invariants.js';

/**
 * What the audit trail of one operation says about its final outcomes, for the checkers' feed
 * and resolution rules. A final outcome is a move INTO completed or failed (the settlement
 * feed writes one event for each: docs/feed.md "What flows"); a resolution is the row
 * settle.resolve writes (event resolve, outcome resolved).
 */
export type FinalStatus = 'completed' | 'failed';

export interface FinalOutcome {
  readonly status: FinalStatus;
  /** The audit row of the move. */
  readonly auditId: string;
  readonly event: string;
}

const isFinal = (status: string | null): status is FinalStatus => status === 'completed' || status === 'failed';

/**
 * The moves into a final status, in audit order. A transition is counted when its status_after
 * is final and differs from the status the trail stood at: settle.resolve(completed) writes
 * its `resolve` row and then the `complete settled` row of its own attempt epoch, one move.
 * Lock-free claim answers (snapshot reads) move nothing.
 */
export function finalOutcomes(rows: readonly AuditRow[]): FinalOutcome[] {
  const outcomes: FinalOutcome[] = [];
  let current: string | null = null;
  for (const row of byAuditId(rows)) {
    if (isSnapshotRead(row) || row.statusAfter === null) continue;
    if (row.event === 'purge') break;
    if (isFinal(row.statusAfter) && row.statusAfter !== current) {
      outcomes.push({ status: row.statusAfter, auditId: row.auditId, event: row.event });
    }
    current = row.statusAfter;
  }
  return outcomes;
}

/** The rows settle.resolve wrote that decided the operation (outcome resolved), in audit order. */
export function resolutions(rows: readonly AuditRow[]): AuditRow[] {
  return byAuditId(rows).filter((row) => row.event === 'resolve' && row.outcome === 'resolved');
}
