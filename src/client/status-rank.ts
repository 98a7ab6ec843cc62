import type { Status } from './types.js';

/**
 * settle.status_rank in TypeScript: the lattice order of settle.status (pending and running share
 * the bottom; a status never moves to a lower rank).
 */
const STATUS_RANK: Readonly<Record<Status, number>> = {
  pending: 1,
  running: 1,
  unknown: 2,
  conflict: 3,
  failed: 4,
  completed: 5,
};

export function statusRank(status: Status): number {
  return STATUS_RANK[status];
}

/** True when `text` names a settle.status. */
export function isStatus(text: string): text is Status {
  return Object.hasOwn(STATUS_RANK, text);
}
