// What a caller receives, and what a key records, when the handler's body breaks off midway or
// the database is read-only (SQLSTATE 25006, as a standby after a failover): one case table, run
// against every adapter (Express, Fastify, pg-settle/fetch on Hono and as a plain fetch handler),
// on real servers and a real PostgreSQL, with the bytes read off a raw socket (docs/http.md,
// "Broken bodies" and "A read-only database").
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { ALL_FRAMEWORKS, type Framework, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest, until } from './support.js';
import { openWire, type WireConnection } from './wire.js';

const MAX_BODY_BYTES = 4096;
const UNDER = 2_000; // the body breaks before the store limit: nothing has left
const OVER = 6_000; // the body breaks past it: the key settled and bytes left

/**
 * How each adapter's test app breaks its body (the x-break header of /broken): Express by a throw
 * or a rejection after res.write(), or a source stream that fails (stream.pipeline destroys the
 * response); the others by a stream payload or Response body that fails. `held`: the break
 * waits on the test's hold, so the test can let it happen after bytes arrived.
 */
const BREAKS: Record<Framework, readonly { readonly how: string; readonly held: boolean }[]> = {
  express: [
    { how: 'throw', held: false },
    { how: 'reject', held: true },
    { how: 'stream', held: true },
  ],
  fastify: [{ how: 'stream', held: true }],
  hono: [{ how: 'stream', held: true }],
  fetch: [{ how: 'stream', held: true }],
};

/**
 * A body that breaks before its first byte left: what the first caller gets. `answered`: a
 * well-framed 500 (the framework's or the platform's answer to the error) on a connection that
 * stays usable; `closed`: the handler destroyed its response, so the connection closes with no
 * byte of it, as it would without the middleware.
 */
const BEFORE_FIRST_BYTE: Record<string, { readonly answer: 'answered' | 'closed'; readonly body?: RegExp }> = {
  'express throw': { answer: 'answered', body: /^\{"error":"the body broke off"\}$/ },
  'express reject': { answer: 'answered', body: /^\{"error":"the body broke off"\}$/ },
  'express stream': { answer: 'closed' },
  'fastify stream': { answer: 'answered', body: /"type":"urn:pg-settle:problem:response-broken"/ },
  'hono stream': { answer: 'answered', body: /^Internal Server Error$/ },
  'fetch stream': { answer: 'answered', body: /^$/ },
};

/**
 * Whether the app's error handling hears of a body that breaks after bytes left: Express's error
 * handler gets the error, Fastify logs it (warn, "response terminated with an error with headers
 * already sent"), the fetch host here catches it; @hono/node-server closes the connection and
 * logs it with console.error, past Hono's onError.
 */
const HEARS_AFTER_BYTES_LEFT: Record<Framework, boolean> = { express: true, fastify: true, hono: false, fetch: true };

const brokeOff = (errors: readonly string[]): boolean => errors.some((e) => e.includes('the body broke off'));

const readOnlyUrl = (url: string): string => {
  // The app's login with default_transaction_read_only (as ALTER ROLE ... SET would give it):
  // every write the engine makes fails with 25006, as on a hot standby.
  const parsed = new URL(asRole(url, 'settle_app'));
  parsed.searchParams.set('options', '-c role=settle_app -c default_transaction_read_only=on');
  return parsed.toString();
};

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let app: TestApp;
  let readOnly: SettleClient;
  let readOnlyApp: TestApp;
  let unstorableApp: TestApp;
  const wires: WireConnection[] = [];
  const wire = async (url: string): Promise<WireConnection> => {
    const w = await openWire(url);
    wires.push(w);
    return w;
  };

  beforeAll(async () => {
    ctx = await setupHttpTest(`http_failures_${framework}`);
    app = await startApp(framework, { settle: ctx.settle, maxBodyBytes: MAX_BODY_BYTES });
    readOnly = createSettleClient({ connectionString: readOnlyUrl(ctx.db.url), poolSize: 2 });
    readOnlyApp = await startApp(framework, { settle: readOnly });
    // A failover between the claim and the settlement: the claim reaches the primary, the
    // observations reach a read-only server.
    const settle = ctx.settle;
    const unstorable: SettleClient = {
      ...settle,
      complete: (handle, result, options) => readOnly.complete(handle, result, options),
      fail: (handle, error, options) => readOnly.fail(handle, error, options),
      reportUnknown: (handle, options) => readOnly.reportUnknown(handle, options),
    };
    unstorableApp = await startApp(framework, { settle: unstorable });
  });
  afterAll(async () => {
    for (const w of wires) w.close();
    await Promise.allSettled([app?.close(), readOnlyApp?.close(), unstorableApp?.close()]);
    await readOnly?.end();
    await ctx?.close();
  });

  describe.each(BREAKS[framework])('a body that breaks off ($how)', ({ how, held }) => {
    test('before its first byte left: a retryable failure; nothing of it reaches the caller; a retry runs the handler again', async () => {
      const key = newKey();
      const calls = app.hooks.calls.broken ?? 0;
      const logged = app.hooks.errors.length;
      const expected = BEFORE_FIRST_BYTE[`${framework} ${how}`]!;
      let connection = await wire(app.url);
      if (expected.answer === 'answered') {
        const first = await connection.request('/broken', { key, json: { bytes: UNDER }, headers: { 'x-break': how } });
        expect(first.status).toBe(500);
        expect(first.complete).toBe(true); // exactly the bytes its head announces
        expect(first.body.toString('latin1')).toMatch(expected.body!);
        expect(first.body.includes('bbbb')).toBe(false);
      } else {
        await expect(
          connection.request('/broken', { key, json: { bytes: UNDER }, headers: { 'x-break': how } }),
        ).rejects.toThrow(/closed before a response head \(0 bytes/);
        connection = await wire(app.url);
      }
      const record = await until(async () => {
        const r = await ctx.admin.inspect({ tenant: 'acme', key });
        return r?.inFlight === false ? r : null;
      });
      expect(record).toMatchObject({ status: 'pending', attempt: 1 }); // a retryable failure, never unknown
      await until(async () => brokeOff(app.hooks.errors.slice(logged))); // the error is not swallowed
      // The same connection (when it stayed open) carries the retry and the replay, each framed.
      const retry = await connection.request('/broken', { key, json: { bytes: UNDER } });
      expect(retry).toMatchObject({ status: 201, complete: true });
      expect(retry.body.equals(Buffer.alloc(UNDER, 'b'))).toBe(true);
      const replay = await connection.request('/broken', { key, json: { bytes: UNDER } });
      expect(replay).toMatchObject({ status: 201, complete: true });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.body.equals(retry.body)).toBe(true);
      expect(app.hooks.calls.broken).toBe(calls + 2);
    });

    test('after bytes left: the connection closes after them, never re-framed; the key is what was stored', async () => {
      const key = newKey();
      const calls = app.hooks.calls.broken ?? 0;
      const logged = app.hooks.errors.length;
      const hold = held ? app.hooks.hold() : null;
      const connection = await wire(app.url);
      const first = connection.request('/broken', { key, json: { bytes: OVER }, headers: { 'x-break': how } });
      if (hold !== null) {
        // Bytes past the store limit have reached this socket: now the body breaks.
        await until(async () => connection.received() > MAX_BODY_BYTES);
        hold.release();
      }
      const answer = await first;
      expect(answer.status).toBe(201); // the status the key settled with
      expect(answer.headers.location).toBe(`/broken/${calls + 1}`);
      expect(answer.complete).toBe(false); // cut short: the caller can tell
      expect(answer.body.length).toBeGreaterThan(MAX_BODY_BYTES);
      expect(answer.body.equals(Buffer.alloc(answer.body.length, 'b'))).toBe(true); // none of an error answer
      expect((await connection.closed).trailing.length).toBe(0); // nothing after: no second response
      if (HEARS_AFTER_BYTES_LEFT[framework]) await until(async () => brokeOff(app.hooks.errors.slice(logged)));
      const record = await ctx.admin.inspect({ tenant: 'acme', key });
      expect(record).toMatchObject({ status: 'completed', result: { v: 1, stored: false, status: 201 } });
      const retry = await send(`${app.url}/broken`, { key, json: { bytes: OVER } });
      expect(retry.status).toBe(410);
      expect(retry.json()).toMatchObject({ type: 'urn:pg-settle:problem:response-not-stored', originalStatus: 201 });
      expect(retry.headers.get('location')).toBe(`/broken/${calls + 1}`);
      expect(app.hooks.calls.broken).toBe(calls + 1);
    });
  });

  describe('a read-only database (25006)', () => {
    const unavailable = async (url: string, path: string, body: unknown): Promise<void> => {
      const connection = await wire(url);
      const answer = await connection.request(path, { key: newKey(), json: body });
      expect(answer).toMatchObject({ status: 503, complete: true });
      expect(answer.headers['retry-after']).toBe('1');
      expect(answer.headers['content-type']).toBe('application/problem+json');
      const problem = JSON.parse(answer.body.toString('utf8')) as Record<string, unknown>;
      expect(problem).toMatchObject({ type: 'urn:pg-settle:problem:settlement-unavailable', status: 503 });
      // Nothing of the engine's error: no SQLSTATE, no statement, no stack.
      expect(answer.body.toString('utf8')).not.toMatch(/25006|read-only|INSERT|SettleDatabaseError|at /);
      // The connection stays usable.
      expect((await connection.request('/orders', { method: 'GET' })).status).toBe(200);
    };

    test('at the claim: 503 settlement-unavailable with Retry-After, the handler does not run', async () => {
      await unavailable(readOnlyApp.url, '/orders', { item: 'book' });
      expect(readOnlyApp.hooks.calls.orders).toBeUndefined();
    });

    test('in transaction mode: 503 settlement-unavailable, the handler does not run, no ledger row', async () => {
      await unavailable(readOnlyApp.url, '/ledger', { account: `ro-${framework}` });
      expect(readOnlyApp.hooks.calls.ledger).toBeUndefined();
      const rows = await ctx.su.query('select 1 from http_ledger where account = $1', [`ro-${framework}`]);
      expect(rows.rowCount).toBe(0);
    });

    test('at the settlement, after the handler ran: 503 settlement-unavailable, never the response that was not stored', async () => {
      const key = newKey();
      const connection = await wire(unstorableApp.url);
      const answer = await connection.request('/orders', { key, json: { item: 'lamp' } });
      expect(answer).toMatchObject({ status: 503, complete: true });
      expect(answer.headers['retry-after']).toBe('1');
      expect(JSON.parse(answer.body.toString('utf8'))).toMatchObject({
        type: 'urn:pg-settle:problem:settlement-unavailable',
      });
      expect(answer.body.toString('utf8')).not.toMatch(/25006|INSERT|UPDATE|cannot execute/);
      expect(unstorableApp.hooks.calls.orders).toBe(1);
      const record = await ctx.admin.inspect({ tenant: 'acme', key });
      expect(record).toMatchObject({ status: 'running', result: null }); // nothing stored; the lease lapses
    });
  });
});
