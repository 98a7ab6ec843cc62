// pg-settle/fetch beyond what middleware.test.ts runs for every adapter: a Web-standard handler
// that throws, on Hono (its onError answers) and as a plain fetch handler (the error reaches the
// host, here a node:http bridge that answers 500), against a real PostgreSQL.
import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createIdempotency, idempotencyOf } from '../../src/http/fetch.js';
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

describe('a body read before the middleware', () => {
  let ctx: HttpTestContext;
  beforeAll(async () => {
    ctx = await setupHttpTest('http_fetch_read_body');
  });
  afterAll(async () => {
    await ctx?.close();
  });

  test("hono: a middleware before it read the body (a validator): fingerprinted from Hono's cache, the handler reads it", async () => {
    const idempotency = createIdempotency({
      settle: ctx.settle,
      binding: () => ({ tenant: 'acme', principal: 'p', generation: 1 }),
    });
    let runs = 0;
    const app = new Hono();
    app.post(
      '/validated',
      async (c, next) => {
        const body = (await c.req.json()) as { qty?: unknown };
        if (typeof body.qty !== 'number') return c.json({ error: 'qty' }, 400);
        await next();
      },
      idempotency.middleware(),
      async (c) => {
        runs += 1;
        return c.json({ runs, attempt: idempotencyOf(c.req.raw)?.attempt, body: await c.req.json() }, 201);
      },
    );
    const server = createAdaptorServer({ fetch: app.fetch });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/validated`;
    try {
      const key = newKey();
      const first = await send(url, { key, json: { qty: 1, sku: 'a' } });
      expect(first.status).toBe(201);
      expect(first.json()).toEqual({ runs: 1, attempt: 1, body: { qty: 1, sku: 'a' } });
      const again = await send(url, { key, json: { sku: 'a', qty: 1 } });
      expect(again.headers.get('idempotent-replayed')).toBe('true');
      expect(again.body.equals(first.body)).toBe(true);
      expect((await send(url, { key, json: { qty: 2, sku: 'a' } })).status).toBe(422);
      expect(runs).toBe(1);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test('a wrapped handler whose request body was already consumed: 500 idempotency-misconfigured, the handler does not run', async () => {
    const idempotency = createIdempotency({
      settle: ctx.settle,
      binding: () => ({ tenant: 'acme', principal: 'p', generation: 1 }),
    });
    let runs = 0;
    const handler = idempotency(async () => {
      runs += 1;
      return new Response(null, { status: 201 });
    });
    const request = new Request('http://localhost/orders', {
      method: 'POST',
      headers: { 'idempotency-key': `"${newKey()}"`, 'content-type': 'application/json' },
      body: '{"qty":1}',
    });
    await request.text();
    const answer = await handler(request);
    expect(answer.status).toBe(500);
    expect(await answer.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-misconfigured' });
    expect(runs).toBe(0);
  });
});
