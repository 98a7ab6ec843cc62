import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { ALL_FRAMEWORKS, startApp, type TestApp } from '../http/apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest } from '../http/support.js';
import { createTestTelemetry, type TestTelemetry } from './sdk.js';

// pg_settle.http.requests: every request the idempotency middleware answers, by result, for
// both frameworks, on real servers and a real database.
describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let otel: TestTelemetry;
  let settle: SettleClient;
  let app: TestApp;

  beforeAll(async () => {
    ctx = await setupHttpTest(`telemetry_http_${framework}`);
    otel = createTestTelemetry();
    settle = createSettleClient({
      connectionString: asRole(ctx.db.url, 'settle_app'),
      poolSize: 4,
      telemetry: { meterProvider: otel.meterProvider },
    });
    app = await startApp(framework, { settle, orders: { leaseMs: 60_000, heartbeatIntervalMs: 600_000 } });
  });
  afterAll(async () => {
    await app?.close();
    await settle?.end();
    await otel?.shutdown();
    await ctx?.close();
  });

  test('first, replay, 400, 409 and 422 are counted once each', async () => {
    const key = newKey();
    expect((await send(`${app.url}/orders`, { key, json: { item: 'book' } })).status).toBe(201);
    expect((await send(`${app.url}/orders`, { key, json: { item: 'book' } })).headers.get('idempotent-replayed')).toBe(
      'true',
    );
    expect((await send(`${app.url}/orders`, { key: null, json: { item: 'book' } })).status).toBe(400);
    expect((await send(`${app.url}/orders`, { key, json: { item: 'pen' } })).status).toBe(422);
    const held = newKey();
    const hold = app.hooks.hold();
    const first = send(`${app.url}/orders`, { key: held, json: { item: 'slow' } });
    await hold.entered;
    expect((await send(`${app.url}/orders`, { key: held, json: { item: 'slow' } })).status).toBe(409);
    hold.release();
    expect((await first).status).toBe(201);
    // A GET is not the middleware's: not counted.
    await fetch(`${app.url}/orders`);

    const points = (await otel.points()).filter((p) => p.name === 'pg_settle.http.requests');
    expect(
      points.every((p) => p.type === 'counter' && Object.keys(p.attributes).join() === 'pg_settle.http.result'),
    ).toBe(true);
    expect(Object.fromEntries(points.map((p) => [p.attributes['pg_settle.http.result'], p.value]))).toEqual({
      first: 2,
      replay: 1,
      '400': 1,
      '409': 1,
      '422': 1,
    });
  });
});
