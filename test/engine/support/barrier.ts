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
      throw new Error(`waitUntilBlocked: only ${rows[0]?.n ?? 0} of ${wanted.length} sessions blocked after ${timeoutMs} ms`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
