// The idempotency middleware end to end, for Express 5, Fastify 5, and pg-settle/fetch on Hono
// and as a plain fetch handler on node:http: real servers on 127.0.0.1,
// Node's fetch, a real PostgreSQL. Interleavings are controlled by holding handlers on latches.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { ALL_FRAMEWORKS, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, observeClaims, send, setupHttpTest, until } from './support.js';

const PROBLEM = 'application/problem+json';

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let app: TestApp;

  beforeAll(async () => {
    ctx = await setupHttpTest(`http_${framework}`);
    app = await startApp(framework, {
      settle: ctx.settle,
      maxBodyBytes: 64 * 1024,
      // No heartbeat during a test: a test that expires the lease must not see it renewed.
      orders: { leaseMs: 60_000, heartbeatIntervalMs: 600_000 },
    });
  });
  afterAll(async () => {
    await app?.close();
    await ctx?.close();
  });

  test('a retry replays status, allowlisted headers and body byte for byte; set-cookie is never replayed', async () => {
    const key = newKey();
    const first = await send(`${app.url}/orders`, { key, json: { item: 'book', qty: 1 } });
    expect(first.status).toBe(201);
    expect(first.headers.get('set-cookie')).toMatch(/^session=s\d+/);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const calls = app.hooks.calls.orders;

    const again = await send(`${app.url}/orders`, { key, json: { qty: 1, item: 'book' } }); // same JSON, other key order
    expect(again.status).toBe(201);
    expect(again.body.equals(first.body)).toBe(true);
    for (const name of ['content-type', 'location', 'etag'])
      expect(again.headers.get(name)).toBe(first.headers.get(name));
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.headers.get('set-cookie')).toBeNull();
    expect(again.headers.get('x-trace')).toBeNull();
    expect(app.hooks.calls.orders).toBe(calls);

    // A non-JSON body is fingerprinted by its bytes.
    const textKey = newKey();
    const text = await send(`${app.url}/text`, { key: textKey, text: 'hello' });
    expect(text.status).toBe(201);
    expect((await send(`${app.url}/text`, { key: textKey, text: 'hello!' })).status).toBe(422);
    const textAgain = await send(`${app.url}/text`, { key: textKey, text: 'hello' });
    expect(textAgain.body.equals(text.body)).toBe(true);
    expect(textAgain.headers.get('idempotent-replayed')).toBe('true');
    expect(app.hooks.calls.text).toBe(1);
  });

  test('the same key as an sf-string and as a bare token is the same key; PATCH is covered', async () => {
    const key = newKey();
    const first = await send(`${app.url}/orders`, { method: 'PATCH', rawKey: key, json: { a: 1 } });
    expect(first.status).toBe(201);
    const again = await send(`${app.url}/orders`, { method: 'PATCH', rawKey: `"${key}";ignored=1`, json: { a: 1 } });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.equals(first.body)).toBe(true);
  });

  test('422 when the key is reused with a different body; the handler does not run', async () => {
    const key = newKey();
    await send(`${app.url}/orders`, { key, json: { item: 'book' } });
    const calls = app.hooks.calls.orders;
    const changed = await send(`${app.url}/orders`, { key, json: { item: 'lamp' } });
    expect(changed.status).toBe(422);
    expect(changed.headers.get('content-type')).toContain(PROBLEM);
    expect(changed.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-key-reused', status: 422 });
    expect(app.hooks.calls.orders).toBe(calls);
    // Another route with the same key and body is another request too.
    expect((await send(`${app.url}/text`, { key, text: 'x' })).status).toBe(422);
  });

  test('400 on a missing or malformed key; optional routes pass keyless requests through', async () => {
    const calls = app.hooks.calls.orders ?? 0;
    const missing = await send(`${app.url}/orders`, { json: {} });
    expect(missing.status).toBe(400);
    expect(missing.headers.get('content-type')).toContain(PROBLEM);
    expect(missing.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-key-missing' });
    for (const rawKey of ['"unterminated', '"a", "b"', `"${'x'.repeat(256)}"`, '"   "', 'a b', '""']) {
      const malformed = await send(`${app.url}/orders`, { rawKey, json: {} });
      expect(malformed.status, rawKey).toBe(400);
      expect(malformed.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-key-malformed' });
    }
    expect(app.hooks.calls.orders ?? 0).toBe(calls);
    // strict: only the draft's sf-string
    expect((await send(`${app.url}/strict`, { rawKey: 'bare-token', json: {} })).status).toBe(400);
    expect((await send(`${app.url}/strict`, { rawKey: '"quoted"', json: {} })).status).toBe(201);
    // required: false
    expect((await send(`${app.url}/optional`, { json: {} })).status).toBe(201);
    expect((await send(`${app.url}/optional`, { json: {} })).json()).toEqual({ optional: 2 });
  });

  test('50 concurrent identical requests: the handler runs once, every answer is the first response or a 409', async () => {
    const key = newKey();
    const before = app.hooks.calls.orders ?? 0;
    const hold = app.hooks.hold();
    const requests = Array.from({ length: 50 }, () => send(`${app.url}/orders`, { key, json: { item: 'concurrent' } }));
    await hold.entered;
    // While the first holds the key, all others are answered 409 (they never wait on it).
    const settled: Awaited<(typeof requests)[number]>[] = [];
    const tracked = requests.map((p) => p.then((r) => (settled.push(r), r)));
    await until(async () => settled.length === 49);
    hold.release();
    const answers = await Promise.all(tracked);
    expect(app.hooks.calls.orders).toBe(before + 1);
    const firsts = answers.filter((a) => a.status === 201);
    const conflicts = answers.filter((a) => a.status === 409);
    expect(firsts).toHaveLength(1);
    expect(conflicts).toHaveLength(49);
    for (const c of conflicts) {
      expect(Number(c.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(c.json()).toMatchObject({ type: 'urn:pg-settle:problem:request-in-progress', status: 409 });
    }
    const replay = await send(`${app.url}/orders`, { key, json: { item: 'concurrent' } });
    expect(replay.body.equals(firsts[0]!.body)).toBe(true);
  });

  test('with waitForMs, concurrent duplicates wait for the first request and replay its response', async () => {
    const observed = observeClaims(ctx.settle);
    const waiting = await startApp(framework, { settle: observed.client, waitForMs: 30_000 });
    try {
      const key = newKey();
      const hold = waiting.hooks.hold();
      const requests = Array.from({ length: 10 }, () => send(`${waiting.url}/orders`, { key, json: { w: 1 } }));
      await hold.entered;
      // Every duplicate has been told in_progress at least once: they are waiting now.
      await until(async () => {
        // The count covers distinct answers, not requests: wait until every duplicate was told at least once.
        return observed.count(key, 'in_progress') >= 9;
      });
      hold.release();
      const answers = await Promise.all(requests);
      expect(waiting.hooks.calls.orders).toBe(1);
      const first = answers.find((a) => a.headers.get('idempotent-replayed') === null)!;
      expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(9);
      for (const a of answers) {
        expect(a.status).toBe(201);
        expect(a.body.equals(first.body)).toBe(true);
      }
    } finally {
      await waiting.close();
    }
  });

  test('GET and HEAD pass through untouched, key or not', async () => {
    const key = newKey();
    const a = await send(`${app.url}/orders`, { method: 'GET', key });
    const b = await send(`${app.url}/orders`, { method: 'GET', key });
    expect(a.status).toBe(200);
    expect(b.json<{ get: number }>().get).toBe(a.json<{ get: number }>().get + 1);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
    const head = await send(`${app.url}/orders`, { method: 'HEAD', key });
    expect(head.status).toBe(200);
    expect(await ctx.admin.inspect({ tenant: 'acme', key })).toBeNull();
  });

  test('keys are bound to the caller: another principal gets 422, another tenant another operation, never a replay', async () => {
    const key = newKey();
    const alice = await send(`${app.url}/orders`, { key, json: { item: 'secret' }, headers: { 'x-user': 'alice' } });
    expect(alice.status).toBe(201);
    const calls = app.hooks.calls.orders;
    const bob = await send(`${app.url}/orders`, { key, json: { item: 'secret' }, headers: { 'x-user': 'bob' } });
    expect(bob.status).toBe(422);
    expect(bob.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-key-bound' });
    expect(bob.body.toString()).not.toContain('order');
    expect(app.hooks.calls.orders).toBe(calls);
    const otherTenant = await send(`${app.url}/orders`, {
      key,
      json: { item: 'secret' },
      headers: { 'x-tenant': 'globex', 'x-user': 'bob' },
    });
    expect(otherTenant.status).toBe(201);
    expect(otherTenant.headers.get('idempotent-replayed')).toBeNull();
    expect(otherTenant.json<{ order: number }>().order).toBe(calls! + 1);
  });

  test('2xx and 4xx are stored; 5xx is not (a retry runs the handler again); 504 is unknown (rerunAfterUnknown runs it again)', async () => {
    const key = newKey();
    const plan = [{ status: 503 }, { status: 504 }, { status: 404 }, { status: 201 }];
    const first = await send(`${app.url}/status`, { key, json: plan });
    expect(first.status).toBe(503);
    expect((await ctx.admin.inspect({ tenant: 'acme', key }))?.status).toBe('pending');
    const second = await send(`${app.url}/status`, { key, json: plan });
    expect(second.status).toBe(504);
    expect((await ctx.admin.inspect({ tenant: 'acme', key }))?.status).toBe('unknown');
    const third = await send(`${app.url}/status`, { key, json: plan });
    expect(third.status).toBe(404);
    // This route sets rerunAfterUnknown: the handler ran again and was told about the unknown.
    expect(third.json()).toMatchObject({ earlier: { count: 2, reportedUnknown: true, mayHaveTakenEffect: true } });
    const replay = await send(`${app.url}/status`, { key, json: plan });
    expect(replay.status).toBe(404);
    expect(replay.body.equals(third.body)).toBe(true);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(app.hooks.calls.status).toBe(3);
  });

  test("after an unknown outcome the handler is not run again by default (as the client's run()): 500 outcome-unknown", async () => {
    const key = newKey();
    const first = await send(`${app.url}/gateway`, { key, json: {} });
    expect(first.status).toBe(504);
    const retry = await send(`${app.url}/gateway`, { key, json: {} });
    expect(retry.status).toBe(500);
    expect(retry.json()).toMatchObject({ type: 'urn:pg-settle:problem:outcome-unknown', deadLettered: false });
    expect(app.hooks.calls.gateway).toBe(1);
    expect((await ctx.admin.inspect({ tenant: 'acme', key }))?.status).toBe('unknown');
  });

  test('a streamed response under the limit is stored and replayed byte for byte', async () => {
    const key = newKey();
    const first = await send(`${app.url}/stream`, { key, json: { chunks: 16, size: 1024 } });
    expect(first.status).toBe(200);
    expect(first.body.length).toBe(16 * 1024);
    const again = await send(`${app.url}/stream`, { key, json: { chunks: 16, size: 1024 } });
    expect(again.status).toBe(200);
    expect(again.body.equals(first.body)).toBe(true);
    expect(again.headers.get('location')).toBe('/streams/1');
    expect(again.headers.get('idempotent-replayed')).toBe('true');
  });

  test('an oversized response reaches the first caller whole; the key settles as not stored (410 on replay), never locked', async () => {
    const key = newKey();
    const calls = app.hooks.calls.stream ?? 0;
    const first = await send(`${app.url}/stream`, { key, json: { chunks: 40, size: 4096 } });
    expect(first.status).toBe(200);
    expect(first.body.length).toBe(40 * 4096);
    expect(first.body.subarray(4096 * 39).every((b) => b === 97 + (39 % 26))).toBe(true);
    const record = await ctx.admin.inspect({ tenant: 'acme', key });
    expect(record?.status).toBe('completed');
    const replay = await send(`${app.url}/stream`, { key, json: { chunks: 40, size: 4096 } });
    expect(replay.status).toBe(410);
    expect(replay.headers.get('location')).toBe('/streams/1');
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.json()).toMatchObject({ type: 'urn:pg-settle:problem:response-not-stored', originalStatus: 200 });
    expect(app.hooks.calls.stream).toBe(calls + 1);
  });

  test('an oversized single-chunk response (res.json / a returned object) has the same outcome as a stream', async () => {
    const key = newKey();
    const big = { blob: 'x'.repeat(70 * 1024) };
    const first = await send(`${app.url}/orders`, { key, json: big });
    expect(first.status).toBe(201);
    expect(first.json<{ body: typeof big }>().body.blob.length).toBe(70 * 1024);
    const replay = await send(`${app.url}/orders`, { key, json: big });
    expect(replay.status).toBe(410);
    expect(replay.json()).toMatchObject({ type: 'urn:pg-settle:problem:response-not-stored', originalStatus: 201 });
    expect(replay.headers.get('location')).toBe(first.headers.get('location'));
  });

  test("a stale handler's late completion is refused: the takeover's response is the one replayed", async () => {
    const key = newKey();
    const hold = app.hooks.hold();
    const stale = send(`${app.url}/orders`, { key, json: { item: 'takeover' } });
    const staleN = await hold.entered;
    expect(await expireLease(ctx.su, 'acme', key)).toBe(true);
    const takeover = await send(`${app.url}/orders`, { key, json: { item: 'takeover' } });
    expect(takeover.status).toBe(201);
    expect(takeover.json()).toMatchObject({ order: staleN + 1, attempt: 2 });
    hold.release();
    const late = await stale;
    // The stale handler's client gets the canonical (takeover's) response, marked as a replay.
    expect(late.body.equals(takeover.body)).toBe(true);
    expect(late.headers.get('idempotent-replayed')).toBe('true');
    const replay = await send(`${app.url}/orders`, { key, json: { item: 'takeover' } });
    expect(replay.body.equals(takeover.body)).toBe(true);
    const attempts = await ctx.admin.attempts({ tenant: 'acme', key });
    expect(attempts.map((a) => [a.attempt, a.settled, a.lateResult !== null])).toEqual([
      [1, false, true],
      [2, true, false],
    ]);
  });

  test('transaction mode: the ledger row and the stored response commit together; a failure rolls back both', async () => {
    const key = newKey();
    const account = `acct-${key}`;
    const ledger = async () =>
      Number((await ctx.su.query('select count(*) from http_ledger where account = $1', [account])).rows[0].count);
    const failed = await send(`${app.url}/ledger`, { key, json: { account }, headers: { 'x-fail': '1' } });
    expect(failed.status).toBe(500);
    expect(await ledger()).toBe(0);
    const afterFailure = await ctx.admin.inspect({ tenant: 'acme', key });
    expect(afterFailure?.status).toBe('pending');
    expect(afterFailure?.result).toBeNull();

    const ok = await send(`${app.url}/ledger`, { key, json: { account } });
    expect(ok.status).toBe(201);
    expect(await ledger()).toBe(1);
    const stored = await ctx.admin.inspect({ tenant: 'acme', key });
    expect(stored?.status).toBe('completed');
    expect(stored?.settledAttempt).toBe(2);
    const replay = await send(`${app.url}/ledger`, { key, json: { account } });
    expect(replay.body.equals(ok.body)).toBe(true);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(await ledger()).toBe(1);
  });
});
