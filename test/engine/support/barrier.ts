import type pg from 'pg';

/** The backend pid of a connection (to watch it from another session). */
export async function backendPid(client: pg.ClientBase): Promise<number> {
  const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  const pid = rows[0]?.pid;
  if (pid === undefined) throw new Error('no backend pid');
  return pid;
}

/**
 * Resolves once every backend in `pids` is waiting on a heavyweight lock (pg_stat_activity
 * wait_event_type = 'Lock'), polling from `observer`. This orders events without sleeping:
 * a session known to be blocked behind a lock runs only after that lock is released.
 * `observer` must not be inside a transaction: pg_stat_activity is snapshotted per transaction.
 */
export async function waitUntilBlocked(
  observer: pg.ClientBase,
  pids: number | readonly number[],
  timeoutMs = 30_000,
): Promise<void> {
  const wanted = typeof pids === 'number' ? [pids] : [...pids];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await observer.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity where pid = any($1::int[]) and wait_event_type = 'Lock'`,
      [wanted],
    );
    if (rows[0]?.n === wanted.length) return;
    if (Date.now() > deadline) {
      throw new Error(
        `waitUntilBlocked: only ${rows[0]?.n ?? 0} of ${wanted.length} sessions blocked after ${timeoutMs} ms`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Session 1 runs `first` inside an open transaction (holding the operation's row lock);
 * session 2 starts `second`, which must queue behind that lock; once it is seen waiting,
 * session 1 commits and session 2 proceeds. Returns both answers, in that order.
 */
export async function secondWaitsForFirst<A, B>(
  sessions: { readonly one: pg.ClientBase; readonly two: pg.ClientBase; readonly observer: pg.ClientBase },
  first: (one: pg.ClientBase) => Promise<A>,
  second: (two: pg.ClientBase) => Promise<B>,
): Promise<[A, B]> {
  const { one, two, observer } = sessions;
  const pid = await backendPid(two);
  return holdUntilSecondWaits(one, two, first, second, () => waitUntilBlocked(observer, pid));
}

/**
 * The ordering both barriers share: `one` runs `first` inside BEGIN, `two` starts `second`;
 * once `secondIsWaiting` resolves (it is seen queued behind one's lock), `one` commits (rolls
 * back on any error). Returns both answers, in that order.
 */
export async function holdUntilSecondWaits<A, B>(
  one: pg.ClientBase,
  two: pg.ClientBase,
  first: (one: pg.ClientBase) => Promise<A>,
  second: (two: pg.ClientBase) => Promise<B>,
  secondIsWaiting: () => Promise<void>,
): Promise<[A, B]> {
  await one.query('begin');
  let a: A;
  let pending: Promise<B> | undefined;
  try {
    a = await first(one);
    pending = second(two);
    pending.catch(() => {}); // observed below; avoid an unhandled rejection while we wait
    await secondIsWaiting();
    await one.query('commit');
  } catch (error) {
    await one.query('rollback').catch(() => {});
    throw error;
  }
  return [a, await pending];
}
