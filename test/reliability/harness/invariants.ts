import { statusRank } from '../../../src/client/status-rank.js';
import type { StatusName } from './history.js';

/**
 * The invariants the checker enforces, by name (docs/protocol.md sections 2-7). Every
 * violation names exactly one of them.
 */
export const INVARIANTS = {
  'status-monotonic': 'the canonical status never moves down the lattice (redrive of a dead letter is the only drop)',
  'audit-continuity': 'the audit trail is a gapless chain of transitions ending in the stored state',
  'result-immutable': 'every answer that carried a result equals the final result, byte for byte',
  'single-settlement': 'at most one settled attempt (one move to completed) per operation',
  'acknowledged-completion-durable': 'an acknowledged settlement is in the final state with its result',
  'superseded-no-effect': 'an attempt without the lease changes the canonical state only by a matching success',
  'lease-exclusive': 'at most one attempt holds the lease; attempt epochs are opened once, in order',
  'mismatch-never-settles': 'a mismatched request or binding never settles, never sees stored state',
  'conflict-discloses-nothing': 'conflicts and invalid tokens disclose no status, result, error or fingerprint',
  'spurious-conflict': 'a call presenting the reserved lock is never answered conflict',
  'success-replays': 'after a settlement, a retry with the same request and binding replays the identical result',
  'failure-replays': 'after a final failure, a retry with the same request and binding replays the same failure',
  'stale-fenced': 'a superseded or released attempt is fenced: no lease extension, no weaker observation merged',
  'retryable-failure-reopens': 'a retryable failure of an attempt with budget left never ends the operation: another attempt can still acquire and settle',
} as const;

export type Invariant = keyof typeof INVARIANTS;

export interface Violation {
  readonly invariant: Invariant;
  readonly tenant: string;
  readonly key: string;
  readonly message: string;
  /** History call ids or audit ids involved. */
  readonly evidence?: readonly (number | string)[];
}

/** settle.status_rank, in TypeScript. */
export const rank: (status: StatusName) => number = statusRank;

/** Collects violations; `keyOf` groups rows and calls by operation. */
export class ViolationLog {
  readonly violations: Violation[] = [];

  add(invariant: Invariant, ref: { tenant: string; key: string }, message: string, evidence?: readonly (number | string)[]): void {
    this.violations.push({
      invariant,
      tenant: ref.tenant,
      key: ref.key,
      message,
      ...(evidence === undefined ? {} : { evidence }),
    });
  }
}

export function keyOf(ref: { tenant: string; key: string }): string {
  return `${ref.tenant}\u0000${ref.key}`;
}

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
