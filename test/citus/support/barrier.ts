import type pg from 'pg';
import { holdUntilSecondWaits } from '../../engine/support/barrier.js';

/**
 * Resolves once `count` backends on a worker are waiting on a heavyweight lock while running a
 * statement that matches `queryLike` (a LIKE pattern): delegated calls wait on the worker that
 * holds the key, not on the coordinator. Polls from `workerObserver` (outside a transaction).
 */
export async function waitUntilBlockedOnWorker(
  workerObserver: pg.ClientBase,
  queryLike: string,
  count: number,
  timeoutMs = 60_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await workerObserver.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where wait_event_type = 'Lock' and query like $1 and pid <> pg_backend_pid()`,
      [queryLike],
    );
    if ((rows[0]?.n ?? 0) >= count) return;
    if (Date.now() > deadline) {
      throw new Error(
        `waitUntilBlockedOnWorker: only ${rows[0]?.n ?? 0} of ${count} calls matching ${queryLike} blocked after ${timeoutMs} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Session one runs `first` inside BEGIN (not delegated: the coordinator runs its statements on
 * the worker, holding the operation's row lock there); session two's delegated call must queue
 * behind that lock on the worker; once it is seen waiting there, session one commits.
 */
export async function secondWaitsForFirstOnWorker<A, B>(
  sessions: { readonly one: pg.ClientBase; readonly two: pg.ClientBase; readonly workerObserver: pg.ClientBase },
  first: (one: pg.ClientBase) => Promise<A>,
  second: (two: pg.ClientBase) => Promise<B>,
  secondLike: string,
): Promise<[A, B]> {
  const { one, two, workerObserver } = sessions;
  return holdUntilSecondWaits(one, two, first, second, () => waitUntilBlockedOnWorker(workerObserver, secondLike, 1));
}
