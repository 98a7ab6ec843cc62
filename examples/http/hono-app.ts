// Web-standard handlers (Request in, Response out) on Hono 4, served by @hono/node-server: the
// same middleware wraps a Next.js route handler, Bun.serve or Deno.serve. In your code the imports
// are 'pg-settle' and 'pg-settle/fetch'. Run it: docs/http.md, "Run the examples".
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { createSettleClient } from '../../src/index.js';
import { createIdempotency, idempotencyOf } from '../../src/http/fetch.js';

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  const idempotency = createIdempotency({
    settle,
    binding: (request) => ({ tenant: 'acme', principal: request.headers.get('x-user') ?? 'anonymous', generation: 1 }),
  });
  let orders = 0;
  const app = new Hono();
  app.post('/orders', idempotency.middleware(), async (c) => {
    orders += 1;
    const attempt = idempotencyOf(c.req.raw)?.attempt;
    return c.json({ order: orders, attempt, body: await c.req.json() }, 201, { location: `/orders/${orders}` });
  });
  // Per route: wait up to 5 s for an in-flight duplicate and replay it instead of answering 409.
  app.post('/exports', idempotency.middleware({ waitForMs: 5_000 }), (c) => c.json({ exported: true }));
  app.post('/search', (c) => c.json({ results: [] }));

  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = (path: string, key: string | null, body: unknown) =>
    fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-user': 'alice', ...(key === null ? {} : { 'idempotency-key': `"${key}"` }) },
      body: JSON.stringify(body),
    });
  const seen: string[] = [];
  try {
    const key = randomUUID();
    const first = await post('/orders', key, { sku: 'A-1' });
    const retry = await post('/orders', key, { sku: 'A-1' });
    seen.push(`${first.status} ${retry.status} replayed=${retry.headers.get('idempotent-replayed')} orders=${orders}`); // 201 201 replayed=true orders=1
    seen.push(`${(await post('/orders', key, { sku: 'B-2' })).status}`); // 422: the key was used for another body
    seen.push(`${(await post('/orders', null, { sku: 'A-1' })).status}`); // 400: the key is required
    seen.push(`${(await post('/search', null, {})).status}`); // 200: no middleware on this route
    for (const line of seen) console.log(line);
    return seen;
  } finally {
    await new Promise((resolve) => server.close(resolve));
    await settle.end();
  }
}

// Run as a program (not when imported by the tests).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.env.DATABASE_URL === undefined) throw new Error('set DATABASE_URL (docs/http.md, "Run the examples")');
  await main(process.env.DATABASE_URL);
}
