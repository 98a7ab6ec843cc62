import type { AuditRow } from './engine-state.js';

/**
 * The one set of invariant names (docs/protocol.md sections 2-7), shared by the history
 * checkers: the reliability suite (test/reliability/harness/checker.ts) judges recorded calls
 * and the engine state against the engine's invariants; the simulator (src/simulator/checker.ts)
 * judges its run against those it can see from its answers, plus its ledger's. Every violation
 * either reports names exactly one of them.
 */
export const ENGINE_INVARIANTS = {
  'status-monotonic': 'the canonical status never moves down the lattice (redrive of a dead letter is the only drop)',
  'audit-continuity': 'the audit trail is a gapless chain of transitions ending in the stored state',
  'result-immutable': 'every answer that carried a result equals the final result, byte for byte',
  'single-settlement':
    'at most one settled attempt (one move to completed) per operation; a completed one has exactly one, answered `settled` once',
  'acknowledged-completion-durable': 'an acknowledged settlement is in the final state with its result',
  'superseded-no-effect': 'an attempt without the lease changes the canonical state only by a matching success',
  'lease-exclusive': 'at most one attempt holds the lease; attempt epochs are opened once, in order',
  'mismatch-never-settles': 'a mismatched request or binding never settles, never sees stored state',
  'conflict-discloses-nothing': 'conflicts and invalid tokens disclose no status, result, error or fingerprint',
  'spurious-conflict': 'a call presenting the reserved lock is never answered conflict',
  'success-replays': 'after a settlement, a retry with the same request and binding replays the identical result',
  'failure-replays': 'after a final failure, a retry with the same request and binding replays the same failure',
  'stale-fenced': 'a superseded or released attempt is fenced: no lease extension, no weaker observation merged',
  'read-gated-by-lock':
    'a read (settle.get) presenting another request or binding than the reservation sees no stored state',
  'revoked-never-settles':
    'after settle.revoke_binding, no call presenting a generation below the floor acquires, extends, settles, replays or reads',
  'timeout-stays-unknown':
    'failed only for a committed failure (every attempt recorded a failure): while an attempt may have taken effect (it reported unknown, conflicted, or lost its lease without an observation), also after a later final failure, and once the status was unknown or conflict, no answer and no final state says failed',
  'retryable-failure-reopens':
    'a retryable failure of an attempt with budget left never ends the operation: another attempt can still acquire and settle',
  'every-operation-final':
    'a run that drives every operation to its end leaves each completed or failed, with no lease left',
  'feed-exactly-once':
    "every final outcome (each move into completed or failed) is delivered exactly once to every consumer, in the key's order",
  'resolution-final':
    'an operation settle.resolve decided is audited (who, why, evidence), keeps the resolved status and has one final outcome',
} as const;

/** The simulator's ledger (settle_sim.sim_payouts): payouts are settlements, one for one. */
export const LEDGER_INVARIANTS = {
  'no-double-pay': 'at most one payout per operation is credited',
  'no-lost-payout': 'every completed operation has its credited payout, and its result names that payout',
} as const;

export type EngineInvariant = keyof typeof ENGINE_INVARIANTS;
export type LedgerInvariant = keyof typeof LEDGER_INVARIANTS;
export type InvariantName = EngineInvariant | LedgerInvariant;

export function describeInvariant(name: InvariantName): string {
  return name in ENGINE_INVARIANTS
    ? ENGINE_INVARIANTS[name as EngineInvariant]
    : LEDGER_INVARIANTS[name as LedgerInvariant];
}

/** A map key for one operation. */
export function keyOf(ref: { tenant: string; key: string }): string {
  return `${ref.tenant}\u0000${ref.key}`;
}

/** Rows or calls grouped by operation, in their order. */
export function groupByKey<T extends { tenant: string; key: string }>(items: readonly T[]): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = keyOf(item);
    let group = groups.get(k);
    if (group === undefined) {
      group = [];
      groups.set(k, group);
    }
    group.push(item);
  }
  return groups;
}

/**
 * Claims that only read (in_progress, replay, conflict, failed without a transition) answer
 * from their snapshot without locking the operation row, so their audit rows are not ordered
 * with the transitions around them: they may show an older status than the row before them,
 * but never one the trail did not reach (docs/protocol.md, audit log).
 */
export function isSnapshotRead(row: Pick<AuditRow, 'event' | 'outcome' | 'statusBefore' | 'statusAfter'>): boolean {
  return (
    (row.event === 'get' || (row.event === 'claim' && row.outcome !== 'acquired')) &&
    row.statusBefore === row.statusAfter
  );
}

/** Audit rows in audit_id order (bigint order, not text order). */
export function byAuditId<T extends Pick<AuditRow, 'auditId'>>(rows: readonly T[]): T[] {
  return [...rows].sort((a, b) => {
    const x = BigInt(a.auditId);
    const y = BigInt(b.auditId);
    return x < y ? -1 : x > y ? 1 : 0;
  });
}
