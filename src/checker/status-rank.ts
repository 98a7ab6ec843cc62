import type { Status } from '../client/types.js';

/**
 * settle.status_rank in TypeScript, for the history checkers (pure functions over rows already
 * read): the lattice order of settle.status (pending and running share the bottom; a status never
 * moves to a lower rank). The database is the authority: test/checker/status-rank.test.ts
 * compares this table with settle.status_rank for every value of the enum. The client never
 * ranks statuses itself; it reads `status_rank` from settle.operations.
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

/** The rank of any status text; 0 for NULL or a text that is no settle.status (like the SQL's NULL). */
export function rankOf(status: string | null | undefined): number {
  return status != null && isStatus(status) ? STATUS_RANK[status] : 0;
}

/** True when `text` names a settle.status. */
export function isStatus(text: string): text is Status {
  return Object.hasOwn(STATUS_RANK, text);
}
