import pg from 'pg';

export interface WaitOptions {
  readonly timeoutMs: number;
  /** Checked between attempts: a message here aborts the wait (e.g. the server process exited). */
  readonly abortReason?: () => string | undefined;
}

/** Polls `url` until `select 1` succeeds; throws on timeout or when `abortReason` answers. */
export async function waitForPostgres(url: string, opts: WaitOptions): Promise<void> {
  const deadline = Date.now() + opts.timeoutMs;
  let lastError: unknown;
  for (;;) {
    const aborted = opts.abortReason?.();
    if (aborted !== undefined) throw new Error(aborted);
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('select 1');
      return;
    } catch (error) {
      lastError = error;
    } finally {
      await client.end().catch(() => {});
    }
    if (Date.now() >= deadline) {
      throw new Error(`PostgreSQL did not accept connections within ${opts.timeoutMs} ms: ${String(lastError)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
