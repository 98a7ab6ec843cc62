// pg-settle/fetch beyond what middleware.test.ts runs for every adapter: a Web-standard handler
// that throws, on Hono (its onError answers) and as a plain fetch handler (the error reaches the
// host, here a node:http bridge that answers 500), against a real PostgreSQL.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import type { TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest } from './support.js';
import { startWebApp, WEB_FRAMEWORKS } from './web-apps.js';

describe.each(WEB_FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let app: TestApp;
  beforeAll(async () => {
    ctx = await setupHttpTest(`http_fetch_${framework}`);
    app = await startWebApp(framework, { settle: ctx.settle });
  });
  afterAll(async () => {
    await app?.close();
    await ctx?.close();
  });

  test('a handler that throws: the host answers 500, the key records a retryable failure, a retry runs it again', async () => {
    const key = newKey();
    const failed = await send(`${app.url}/throws`, { key, json: { a: 1 } });
    expect(failed.status).toBe(500);
    const record = await ctx.admin.inspect({ tenant: 'acme', key });
    expect(record).toMatchObject({ status: 'pending', attempt: 1, inFlight: false });
    const retry = await send(`${app.url}/throws`, { key, json: { a: 1 } });
    expect(retry.status).toBe(201);
    expect(retry.json()).toEqual({ n: 2, attempt: 2 });
    const replay = await send(`${app.url}/throws`, { key, json: { a: 1 } });
    expect(replay.body.equals(retry.body)).toBe(true);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(app.hooks.calls.throws).toBe(2);
  });

  test('a JSON body is fingerprinted by its value, as behind Express: key order does not matter, a changed value is 422', async () => {
    const key = newKey();
    const first = await send(`${app.url}/orders`, { key, json: { item: 'book', qty: 1 } });
    expect(first.status).toBe(201);
    const reordered = await send(`${app.url}/orders`, { key, json: { qty: 1, item: 'book' } });
    expect(reordered.headers.get('idempotent-replayed')).toBe('true');
    const record = await ctx.admin.inspect({ tenant: 'acme', key });
    expect((record?.request as { body: string }).body).toMatch(/^json:[0-9a-f]{64}$/);
    expect((await send(`${app.url}/orders`, { key, json: { item: 'book', qty: 2 } })).status).toBe(422);
  });
});
