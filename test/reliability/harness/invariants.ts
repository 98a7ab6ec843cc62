import type { EngineInvariant } from '../../../src/checker/invariants.js';
import { statusRank } from '../../../src/checker/status-rank.js';
import type { StatusName } from './history.js';

/**
 * The invariants this checker enforces are the engine's (src/checker/invariants.ts, one set of
 * names for every history checker). Every violation names exactly one of them.
 */
export { groupByKey, keyOf } from '../../../src/checker/invariants.js';
export type Invariant = EngineInvariant;

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

/** Collects violations. */
export class ViolationLog {
  readonly violations: Violation[] = [];

  add(
    invariant: Invariant,
    ref: { tenant: string; key: string },
    message: string,
    evidence?: readonly (number | string)[],
  ): void {
    this.violations.push({
      invariant,
      tenant: ref.tenant,
      key: ref.key,
      message,
      ...(evidence === undefined ? {} : { evidence }),
    });
  }
}
