// The same idea with Fastify 5: a plugin whose hooks cover the instance, options per route in
// `config.idempotency`. In your code the imports are 'pg-settle' and 'pg-settle/fastify'.
// Run it: docs/http.md, "Run the examples".
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import Fastify from 'fastify';
import { createSettleClient } from '../../src/index.js';
import { idempotency } from '../../src/http/fastify.js';

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  const app = Fastify();
  await app.register(idempotency, {
    settle,
    binding: (req) => ({ tenant: 'acme', principal: String(req.headers['x-user']), generation: 1 }),
  });
  let orders = 0;
  app.post('/orders', async (req, reply) => {
    orders += 1;
    return reply.code(201).header('location', `/orders/${orders}`).send({ order: orders, body: req.body });
  });
  // Per route: wait up to 5 s for an in-flight duplicate and replay it instead of answering 409.
  app.post('/exports', { config: { idempotency: { waitForMs: 5_000 } } }, async () => ({ exported: true }));
  app.post('/search', { config: { idempotency: false } }, async () => ({ results: [] }));

  const base = await app.listen({ port: 0, host: '127.0.0.1' });
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
    seen.push(`${(await post('/orders', null, { sku: 'A-1' })).status}`); // 400: the key is required
    seen.push(`${(await post('/search', null, {})).status}`); // 200: turned off for this route
    for (const line of seen) console.log(line);
    return seen;
  } finally {
    await app.close();
    await settle.end();
  }
}

// Run as a program (not when imported by the tests).
if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.env.DATABASE_URL === undefined) throw new Error('set DATABASE_URL (docs/http.md, "Run the examples")');
  await main(process.env.DATABASE_URL);
}
