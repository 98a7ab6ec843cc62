// The defined outcomes at the edges: a handler that does not answer in time, a database that is
// down before the handler runs, a body no parser read.
import express from 'express';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient } from '../../src/index.js';
import { createIdempotency } from '../../src/http/express.js';
import { ALL_FRAMEWORKS, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest, until } from './support.js';

let ctx: HttpTestContext;
beforeAll(async () => {
  ctx = await setupHttpTest('http_edges');
});
afterAll(async () => {
  await ctx?.close();
});

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let app: TestApp;
  let down: TestApp;
  // A client whose database is unreachable (nothing listens on port 1).
  const unreachable = createSettleClient({ connectionString: 'postgres://settle@127.0.0.1:1/none', poolSize: 1 });
  beforeAll(async () => {
    app = await startApp(framework, { settle: ctx.settle, slowTimeoutMs: 300 });
    down = await startApp(framework, { settle: unreachable });
  });
  afterAll(async () => {
    await app?.close();
    await down?.close();
    await unreachable.end().catch(() => {});
  });

  test('a handler that does not answer within handlerTimeoutMs: 503 handler-timeout, outcome unknown, never locked', async () => {
    const key = newKey();
    const hold = app.hooks.hold();
    const answered = send(`${app.url}/slow`, { key, json: {} });
    await hold.entered;
    const timedOut = await answered; // the timer answers while the handler is still held
    expect(timedOut.status).toBe(503);
    expect(timedOut.headers.get('retry-after')).toBe('1');
    expect(timedOut.json()).toMatchObject({ type: 'urn:pg-settle:problem:handler-timeout' });
    const record = await ctx.admin.inspect({ tenant: 'acme', key });
    expect(record).toMatchObject({ status: 'unknown', inFlight: false }); // the lease is released
    hold.release();
    if (framework === 'express' || framework === 'fetch') {
      // The handler's late response is still captured (never sent) and settles the key.
      const settled = await until(async () => {
        const r = await ctx.admin.inspect({ tenant: 'acme', key });
        return r?.status === 'completed' ? r : null;
      });
      expect(settled.settledAttempt).toBe(1);
      const replay = await send(`${app.url}/slow`, { key, json: {} });
      expect(replay.status).toBe(201);
      expect(replay.json()).toEqual({ slow: 1 });
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
    } else {
      // Fastify drops a send after the reply went out, and Hono keeps the answer as c.res in
      // place of the handler's late response: the outcome stays unknown, and the next request is
      // not run blindly (the first one may have taken effect).
      const retry = await send(`${app.url}/slow`, { key, json: {} });
      expect(retry.status).toBe(500);
      expect(retry.json()).toMatchObject({ type: 'urn:pg-settle:problem:outcome-unknown' });
    }
    expect(app.hooks.calls.slow).toBe(1);
  });

  test('a database that does not answer before the handler runs: 503 settlement-unavailable, nothing executed', async () => {
    const answer = await send(`${down.url}/orders`, { key: newKey(), json: {} });
    expect(answer.status).toBe(503);
    expect(answer.headers.get('retry-after')).toBe('1');
    expect(answer.json()).toMatchObject({ type: 'urn:pg-settle:problem:settlement-unavailable' });
    expect(down.hooks.calls.orders).toBeUndefined();
  });
});

test('express: a body that no parser read cannot be fingerprinted: 500 idempotency-misconfigured, handler not run', async () => {
  const app = express();
  let calls = 0;
  app.post(
    '/raw',
    createIdempotency({ settle: ctx.settle, binding: () => ({ tenant: 'acme', principal: 'p', generation: 1 }) })(),
    (_req, res) => {
      calls += 1;
      res.sendStatus(201);
    },
  );
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const answer = await send(`${url}/raw`, { key: newKey(), json: { a: 1 } });
    expect(answer.status).toBe(500);
    expect(answer.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-misconfigured' });
    expect(calls).toBe(0);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
