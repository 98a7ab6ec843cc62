// What the caller receives in the hard cases, for Express 5 and Fastify 5 on real
// servers and a real PostgreSQL: a handler that throws after it answered, a key reused against
// another resource, retries after an unknown outcome, a login not granted the tenant, and a
// transaction-mode handler that also queries through the client's pool.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { createTestTelemetry, type TestTelemetry } from '../telemetry/sdk.js';
import { FRAMEWORKS, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest, until } from './support.js';

const PROBLEM = 'urn:pg-settle:problem:';

describe.each(FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let otel: TestTelemetry;
  let settle: SettleClient;
  let app: TestApp;
  const afterResponse: unknown[] = [];

  beforeAll(async () => {
    ctx = await setupHttpTest(`http_answers_${framework}`);
    otel = createTestTelemetry();
    settle = createSettleClient({
      connectionString: asRole(ctx.db.url, 'settle_app'),
      poolSize: 6,
      telemetry: { meterProvider: otel.meterProvider },
    });
    app = await startApp(framework, { settle, onErrorAfterResponse: (error) => afterResponse.push(error) });
  });
  afterAll(async () => {
    await app?.close();
    await settle?.end();
    await otel?.shutdown();
    await ctx?.close();
  });

  const errorsAfterResponse = async (): Promise<number> => otel.total('pg_settle.http.errors_after_response', {});

  test('a handler that throws right after it answered: the caller gets the stored response byte for byte; the error is counted, never sent', async () => {
    const key = newKey();
    const before = afterResponse.length;
    const first = await send(`${app.url}/throws-after`, { key, json: { n: 1 } });
    expect(first.status).toBe(201);
    expect(first.json()).toEqual({ thrown: 1 });
    expect(Number(first.headers.get('content-length'))).toBe(first.body.length);
    // Settled by the time the caller has it: a retry at once is a replay, not a 409.
    const replay = await send(`${app.url}/throws-after`, { key, json: { n: 1 } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
    await until(async () => afterResponse.length === before + 1);
    expect(String((afterResponse.at(-1) as Error).message)).toMatch(
      framework === 'express' ? /\(201\).*\(500\) was discarded/ : /audit failed/,
    );
    expect(await errorsAfterResponse()).toBeGreaterThanOrEqual(1);
    expect(app.hooks.calls['throws-after']).toBe(1);
  });

  test('a handler whose promise rejects after its response went out: the response stands, the error is counted, never sent', async () => {
    const key = newKey();
    const before = afterResponse.length;
    const counted = await errorsAfterResponse();
    const hold = app.hooks.hold();
    const first = await send(`${app.url}/rejects-after`, { key, json: {} }); // answered while the handler is held
    await hold.entered;
    expect(first.status).toBe(201);
    expect(first.json()).toEqual({ rejected: 1 });
    hold.release(); // now it throws
    await until(async () => afterResponse.length === before + 1);
    expect(await errorsAfterResponse()).toBe(counted + 1);
    const replay = await send(`${app.url}/rejects-after`, { key, json: {} });
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.status).toBe(201);
    // The keep-alive connection is still usable: the next request is answered normally.
    expect((await send(`${app.url}/orders`, { key: newKey(), json: {} })).status).toBe(201);
  });

  test('the fingerprint covers method, concrete path and query string, however the middleware is mounted: another resource is 422', async () => {
    for (const prefix of ['', '/v2']) {
      const key = newKey();
      const url = (account: string, currency: string) =>
        `${app.url}${prefix}/accounts/${account}/payouts?currency=${currency}`;
      const first = await send(url('acct_A', 'EUR'), { key, json: { amount: '10.00' } });
      expect(first.status, prefix).toBe(201);
      expect(first.json()).toMatchObject({ account: 'acct_A', currency: 'EUR' });
      const again = await send(url('acct_A', 'EUR'), { key, json: { amount: '10.00' } });
      expect(again.headers.get('idempotent-replayed'), prefix).toBe('true');
      expect(again.body.equals(first.body)).toBe(true);
      for (const other of [url('acct_B', 'EUR'), url('acct_A', 'USD')]) {
        const refused = await send(other, { key, json: { amount: '10.00' } });
        expect(refused.status, other).toBe(422);
        expect(refused.json()).toMatchObject({ type: `${PROBLEM}idempotency-key-reused` });
        expect(refused.body.toString()).not.toContain('acct_A');
      }
    }
    // fingerprintTarget: 'route' narrows it to the route pattern (documented as the risky choice).
    const key = newKey();
    const a = await send(`${app.url}/narrow/accounts/acct_A/payouts`, { key, json: { amount: '1.00' } });
    const b = await send(`${app.url}/narrow/accounts/acct_B/payouts`, { key, json: { amount: '1.00' } });
    expect(b.headers.get('idempotent-replayed')).toBe('true');
    expect(b.body.equals(a.body)).toBe(true);
  });

  test('retries after an unknown outcome: every one answers the same 500 outcome-unknown, without Retry-After, and opens no attempt', async () => {
    const key = newKey();
    expect((await send(`${app.url}/gateway`, { key, json: {} })).status).toBe(504); // downstream timed out: unknown
    for (let retry = 1; retry <= 7; retry++) {
      const answer = await send(`${app.url}/gateway`, { key, json: {} });
      expect(answer.status, `retry ${retry}`).toBe(500);
      expect(answer.headers.get('retry-after')).toBeNull();
      expect(answer.json()).toMatchObject({ type: `${PROBLEM}outcome-unknown`, status: 500, deadLettered: false });
    }
    expect(app.hooks.calls.gateway).toBe(1);
    expect(await ctx.admin.attempts({ tenant: 'acme', key })).toHaveLength(1); // more than maxAttempts retries, one attempt
    expect(await ctx.admin.inspect({ tenant: 'acme', key })).toMatchObject({ status: 'unknown', attempt: 1 });

    // Two other instances behind the load balancer (separate settle clients, as separate
    // processes or a restarted one would have; neither saw the key become unknown), retrying
    // in turn and all at once: every answer is the same 500, nothing runs, no attempt is opened
    // (the engine answers in_doubt: settle.claim(rerun_after_unknown => false)).
    const instances = await Promise.all(
      [1, 2].map(async () => {
        const client = createSettleClient({ connectionString: asRole(ctx.db.url, 'settle_app'), poolSize: 2 });
        return { client, app: await startApp(framework, { settle: client }) };
      }),
    );
    try {
      for (let retry = 1; retry <= 3; retry++) {
        for (const instance of instances) {
          const answer = await send(`${instance.app.url}/gateway`, { key, json: {} });
          expect(answer.status).toBe(500);
          expect(answer.headers.get('retry-after')).toBeNull();
          expect(answer.json()).toMatchObject({ type: `${PROBLEM}outcome-unknown`, status: 500, deadLettered: false });
        }
      }
      const burst = await Promise.all(
        instances.flatMap((instance) => [1, 2, 3].map(() => send(`${instance.app.url}/gateway`, { key, json: {} }))),
      );
      for (const answer of burst) {
        expect(answer.status).toBe(500);
        expect(answer.json()).toMatchObject({ type: `${PROBLEM}outcome-unknown` });
      }
      for (const instance of instances) expect(instance.app.hooks.calls.gateway).toBeUndefined();
      expect(await ctx.admin.attempts({ tenant: 'acme', key })).toHaveLength(1);
      expect(await ctx.admin.inspect({ tenant: 'acme', key })).toMatchObject({
        status: 'unknown',
        attempt: 1,
        deadLetteredAt: null,
      });
    } finally {
      for (const instance of instances) {
        await instance.app.close();
        await instance.client.end();
      }
    }
  });

  test('a login not granted the tenant (SE013): the caller gets a plain 500, the operator the cause (log hook, metric); nothing run', async () => {
    const role = `http_globex_${framework}_${process.pid}`;
    await ctx.su.query(`drop role if exists ${role}`);
    await ctx.su.query(`create role ${role} login in role settle_app`);
    await ctx.su.query(`select settle.grant_tenant(role => $1, tenant => 'globex')`, [role]);
    const url = new URL(ctx.db.url);
    url.username = role;
    url.password = '';
    const bound = createSettleClient({
      connectionString: url.toString(),
      poolSize: 2,
      telemetry: { meterProvider: otel.meterProvider },
    });
    const reported: Error[] = [];
    const other = await startApp(framework, {
      settle: bound,
      orders: { onMisconfiguration: (error) => reported.push(error) },
    });
    try {
      const answer = await send(`${other.url}/orders`, { key: newKey(), json: {}, headers: { 'x-tenant': 'acme' } });
      expect(answer.status).toBe(500);
      expect(answer.headers.get('content-type')).toContain('application/problem+json');
      expect(answer.headers.get('retry-after')).toBeNull();
      expect(answer.json()).toMatchObject({ type: `${PROBLEM}idempotency-misconfigured`, status: 500 });
      // Nothing of the deployment reaches the caller; all of it reaches the operator.
      expect(answer.body.toString()).not.toMatch(/SE013|grant_tenant|tenant/);
      expect(reported.map((e) => e.message)).toEqual([
        expect.stringMatching(/not granted this tenant \(SE013, settle\.grant_tenant\)/),
      ]);
      expect(reported[0]?.name).toBe('IdempotencyMisconfiguredError');
      expect(await otel.total('pg_settle.http.requests', { 'pg_settle.http.result': 'misconfigured' })).toBe(1);
      expect(other.hooks.calls.orders).toBeUndefined();
      // The tenant it is granted works.
      expect(
        (await send(`${other.url}/orders`, { key: newKey(), json: {}, headers: { 'x-tenant': 'globex' } })).status,
      ).toBe(201);
    } finally {
      await other.close();
      await bound.end();
      await ctx.su.query(`drop owned by ${role}`).catch(() => {});
      await ctx.su.query(`drop role if exists ${role}`).catch(() => {});
    }
  });

  test('the grant revoked while the handler ran: the caller is told the request may have taken effect, never that nothing ran', async () => {
    const role = `http_revoked_${framework}_${process.pid}`;
    await ctx.su.query(`drop role if exists ${role}`);
    await ctx.su.query(`create role ${role} login in role settle_app`);
    await ctx.su.query(`select settle.grant_tenant(role => $1, tenant => 'acme')`, [role]);
    const url = new URL(ctx.db.url);
    url.username = role;
    url.password = '';
    const bound = createSettleClient({ connectionString: url.toString(), poolSize: 2 });
    const reported: Error[] = [];
    const other = await startApp(framework, {
      settle: bound,
      orders: { onMisconfiguration: (error) => reported.push(error) },
    });
    try {
      const key = newKey();
      const hold = other.hooks.hold();
      const pending = send(`${other.url}/orders`, { key, json: { n: 1 } });
      await hold.entered;
      // The handler has run its effect; the login loses the tenant before complete().
      await ctx.su.query(`select settle.revoke_tenant(role => $1, tenant => 'acme')`, [role]);
      hold.release();
      const answer = await pending;
      expect(answer.status).toBe(500);
      expect(answer.json()).toMatchObject({ type: `${PROBLEM}idempotency-misconfigured`, status: 500 });
      expect(answer.json().detail).not.toMatch(/nothing was executed/);
      expect(answer.json().detail).toMatch(/may have taken effect/);
      expect(answer.body.toString()).not.toMatch(/SE013|grant_tenant|tenant/);
      expect(reported.map((e) => e.message)).toEqual([
        expect.stringMatching(/not granted this tenant \(SE013, settle\.grant_tenant\).*may have taken effect/),
      ]);
      expect(other.hooks.calls.orders).toBe(1);
      // Nothing was stored: the operation is still running under the handler's attempt.
      expect(await ctx.admin.inspect({ tenant: 'acme', key })).toMatchObject({ status: 'running', attempt: 1 });
    } finally {
      await other.close();
      await bound.end();
      await ctx.su.query(`drop owned by ${role}`).catch(() => {});
      await ctx.su.query(`drop role if exists ${role}`).catch(() => {});
    }
  });

  test("a body over the parser's limit (Express 100 KB, Fastify 1 MiB by default): 413 before the middleware, nothing claimed", async () => {
    const key = newKey();
    const big = { blob: 'x'.repeat(1024 * 1024 + 1) };
    const answer = await send(`${app.url}/orders`, { key, json: big });
    expect(answer.status).toBe(413);
    expect(await ctx.admin.inspect({ tenant: 'acme', key })).toBeNull();
    expect((await send(`${app.url}/orders`, { key, json: big })).status).toBe(413);
  });

  test('transaction mode: a handler may also query through settle.getPool() (outside the request transaction), the same on both', async () => {
    const key = newKey();
    const account = `pool-${key}`;
    const first = await send(`${app.url}/ledger-pool`, { key, json: { account } });
    expect(first.status).toBe(201);
    // The pool's connection does not see the request transaction's uncommitted row.
    expect(first.json()).toMatchObject({ committedBefore: 0 });
    const rows = await ctx.su.query('select count(*)::int as n from http_ledger where account = $1', [account]);
    expect(rows.rows[0].n).toBe(1);
    const replay = await send(`${app.url}/ledger-pool`, { key, json: { account } });
    expect(replay.body.equals(first.body)).toBe(true);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
  });
});
