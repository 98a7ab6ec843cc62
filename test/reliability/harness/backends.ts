import type pg from 'pg';

/**
 * Explicit synchronization on the server's own view of sessions (pg_stat_activity), instead of
 * sleeping and hoping: poll until the backends of `applicationName` match `condition`.
 */
export async function waitForBackends(
  admin: pg.ClientBase,
  applicationName: string,
  condition: { count: number; waitEventType?: 'Lock'; state?: string },
  timeoutMs = 30_000,
): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await admin.query<{ pid: number }>(
      `select pid from pg_stat_activity
        where datname = current_database() and application_name = $1
          and ($2::text is null or wait_event_type = $2) and ($3::text is null or state = $3)
        order by pid`,
      [applicationName, condition.waitEventType ?? null, condition.state ?? null],
    );
    if (rows.length === condition.count) return rows.map((r) => r.pid);
    if (Date.now() > deadline) {
      throw new Error(
        `waitForBackends(${applicationName}): ${rows.length} backends, wanted ${condition.count} ${JSON.stringify(condition)}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A promise plus the function that resolves it: a one-shot barrier. */
export function gate(): { wait: Promise<void>; open: () => void } {
  let open!: () => void;
  const wait = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { wait, open };
}
