import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole, waitFor } from '../client/helpers.js';
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
    app = await startApp(framework, {
      settle,
      orders: { leaseMs: 60_000, heartbeatIntervalMs: 600_000 },
      slowTimeoutMs: 500,
    });
  });
  afterAll(async () => {
    await app?.close();
    await settle?.end();
    await otel?.shutdown();
    await ctx?.close();
  });

  test('the middleware, once created, counts unknown outcomes from 0 for every reason', async () => {
    // Before any request: Prometheus' rate() needs a sample before the first increment.
    const points = (await otel.points()).filter((p) => p.name === 'pg_settle.unknown_outcomes');
    expect(
      points.map((p) => [p.attributes['pg_settle.source'], p.attributes['pg_settle.reason'], p.value]).sort(),
    ).toEqual([
      ['http', 'handler_error', 0],
      ['http', 'handler_timeout', 0],
      ['http', 'needs_reconciliation', 0],
      ['http', 'response_policy', 0],
      ['http', 'settle_call_failed', 0],
    ]);
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

  test("the middleware's own time by result, its handler as an effect (pg_settle.http), unknown outcomes by reason", async () => {
    const count = async (name: string, match: Record<string, string>) => otel.total(name, match);
    const unknown = (reason: string) =>
      count('pg_settle.unknown_outcomes', { 'pg_settle.source': 'http', 'pg_settle.reason': reason });
    const effect = (outcome: string) =>
      count('pg_settle.run.effect.duration', { 'pg_settle.operation': 'pg_settle.http', 'pg_settle.outcome': outcome });
    const before = {
      policy: await unknown('response_policy'),
      again: await unknown('needs_reconciliation'),
      timeout: await unknown('handler_timeout'),
      completed: await effect('completed'),
      unknown: await effect('unknown'),
    };
    expect((await send(`${app.url}/orders`, { key: newKey(), json: { item: 'ink' } })).status).toBe(201);
    // A 504: the default response policy records the outcome unknown; a retry of the key is answered outcome-unknown.
    const gateway = newKey();
    expect((await send(`${app.url}/gateway`, { key: gateway, json: {} })).status).toBe(504);
    expect((await send(`${app.url}/gateway`, { key: gateway, json: {} })).status).toBe(500);
    // No response within handlerTimeoutMs (500 ms): 503, outcome unknown.
    const slow = newKey();
    const hold = app.hooks.hold();
    const timedOut = send(`${app.url}/slow`, { key: slow, json: {} });
    await hold.entered;
    expect((await timedOut).status).toBe(503);
    hold.release();
    // Express and fetch still store the late response (test/http/edges.test.ts): wait for it, so
    // nothing is left running when the app closes.
    if (framework === 'express' || framework === 'fetch')
      await waitFor(async () => (await ctx.admin.inspect({ tenant: 'acme', key: slow }))?.status === 'completed');

    expect(await unknown('response_policy')).toBe(before.policy + 1);
    expect(await unknown('needs_reconciliation')).toBe(before.again + 1);
    expect(await unknown('handler_timeout')).toBe(before.timeout + 1);
    expect(await effect('completed')).toBe(before.completed + 1);
    expect(await effect('unknown')).toBe(before.unknown + 2);
    // The timed-out handler is an effect of at least the timeout.
    const slowEffect = (await otel.points()).find(
      (p) =>
        p.name === 'pg_settle.run.effect.duration' &&
        p.attributes['pg_settle.operation'] === 'pg_settle.http' &&
        p.attributes['pg_settle.outcome'] === 'unknown',
    );
    expect(slowEffect?.sum ?? 0).toBeGreaterThanOrEqual(0.5);

    // The middleware's own time: one point per counted request, by the same result.
    const points = await otel.points();
    const requests = points.filter((p) => p.name === 'pg_settle.http.requests');
    const durations = points.filter((p) => p.name === 'pg_settle.http.middleware.duration');
    expect(durations.every((p) => p.type === 'histogram' && p.unit === 's')).toBe(true);
    expect(Object.fromEntries(durations.map((p) => [p.attributes['pg_settle.http.result'], p.value]))).toEqual(
      Object.fromEntries(requests.map((p) => [p.attributes['pg_settle.http.result'], p.value])),
    );
    expect(durations.find((p) => p.attributes['pg_settle.http.result'] === '503')?.value).toBe(1);
    expect(durations.every((p) => (p.sum ?? -1) >= 0)).toBe(true);
  });
});
