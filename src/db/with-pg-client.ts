import pg from 'pg';

/**
 * Opens one plain pg connection to `url`, runs `fn` on it and always closes it. Errors the
 * connection emits while idle (a terminated backend, a stopped server) are ignored: `fn` sees
 * them as failed queries.
 */
export async function withPgClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}
