import { sql } from 'slonik';
import { beforeEach, describe, expect, it } from 'vitest';
import { createSettleClient, type RunInput, type RunOutcome, type SettleClient } from '../../src/index.js';
import { expireLease } from '../../src/testing/clock.js';
import { createClientTelemetry, NOOP_TELEMETRY, recordHttpRequest } from '../../src/client/telemetry.js';
import { asRole, binding, gate, useClientTest, someoneWaitsOnLock, uniqueKey, waitFor } from '../client/helpers.js';
import { createTestTelemetry, type TestTelemetry } from './sdk.js';

// The client's metrics and spans, read through the real OpenTelemetry SDK (an in-memory pull
// reader and span exporter) against a real database.

const t = useClientTest('telemetry_client');
let otel: TestTelemetry;
let client: SettleClient;
const tenant = 'acme';
const runInput = (key: string, extra: Partial<RunInput> = {}): RunInput => ({
  tenant,
  key,
  request: { amount: '5.00' },
  binding,
  ...extra,
});

beforeEach(() => {
  // A fresh SDK and client per test: every count below starts at zero.
  otel = createTestTelemetry();
  client = t.client({ telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider } });
});

const CALL = 'db.client.operation.duration';

describe('client metrics', () => {
  it('run(): one duration point per settle call, outcomes of calls and of run(), effect duration by outcome', async () => {
    const key = uniqueKey();
    expect(await client.run(runInput(key), async () => 'paid')).toMatchObject({ outcome: 'completed' });
    expect(await client.run(runInput(key), async () => 'never')).toMatchObject({ outcome: 'replay' });

    const points = await otel.points();
    const calls = points.filter((p) => p.name === CALL);
    expect(calls.every((p) => p.type === 'histogram' && p.unit === 's')).toBe(true);
    expect(
      calls.map((p) => [p.attributes['db.operation.name'], p.attributes['pg_settle.outcome'], p.value]).sort(),
    ).toEqual([
      ['settle.claim', 'acquired', 1],
      ['settle.claim', 'replay', 1],
      ['settle.complete', 'settled', 1],
    ]);
    expect(calls.every((p) => p.attributes['db.system.name'] === 'postgresql' && (p.sum ?? 0) > 0)).toBe(true);

    expect(
      await otel.total('pg_settle.outcomes', {
        'pg_settle.operation': 'settle.complete',
        'pg_settle.outcome': 'settled',
        'pg_settle.reason': 'current_attempt',
      }),
    ).toBe(1);
    expect(
      await otel.total('pg_settle.outcomes', {
        'pg_settle.operation': 'pg_settle.run',
        'pg_settle.outcome': 'completed',
      }),
    ).toBe(1);
    expect(
      await otel.total('pg_settle.outcomes', { 'pg_settle.operation': 'pg_settle.run', 'pg_settle.outcome': 'replay' }),
    ).toBe(1);
    // The replay did not run the effect: one effect duration, completed.
    const effects = points.filter((p) => p.name === 'pg_settle.run.effect.duration');
    expect(effects.map((p) => [p.attributes['pg_settle.outcome'], p.value, p.unit])).toEqual([['completed', 1, 's']]);
  });

  it('effect duration: failed, lease_lost (fenced) and unknown', async () => {
    const failedKey = uniqueKey();
    expect(
      await client.run(runInput(failedKey), async () => {
        throw new Error('503');
      }),
    ).toMatchObject({ outcome: 'failed' });

    // Lease lost: the lease lapses while the effect runs and another worker takes over.
    const lostKey = uniqueKey();
    const started = gate();
    const takenOver = gate();
    const fenced = client.run(runInput(lostKey, { heartbeatIntervalMs: 3_600_000 }), async ({ heartbeat }) => {
      started.open();
      await takenOver.promise;
      await heartbeat();
      throw new Error('lost');
    });
    await started.promise;
    await expireLease(t.su, tenant, lostKey);
    expect(await t.app.claim(runInput(lostKey))).toMatchObject({ outcome: 'acquired' });
    takenOver.open();
    expect(await fenced).toMatchObject({ outcome: 'fenced' });

    // Unknown: complete() hits statement_timeout behind a row lock (as in test/client/run.test.ts).
    const unknownKey = uniqueKey();
    const pool = await client.getPool();
    let unknown: RunOutcome | undefined;
    try {
      unknown = await pool.connect(async (connection) => {
        await connection.query(sql.unsafe`set statement_timeout = 500`);
        return client.run(
          runInput(unknownKey),
          async () => {
            await t.su.query('begin');
            await t.su.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
              tenant,
              unknownKey,
            ]);
            return 'done';
          },
          { connection },
        );
      });
    } finally {
      await t.su.query('rollback');
    }
    expect(unknown).toMatchObject({ outcome: 'unknown' });

    const effects = (await otel.points()).filter((p) => p.name === 'pg_settle.run.effect.duration');
    expect(effects.map((p) => [p.attributes['pg_settle.outcome'], p.value]).sort()).toEqual([
      ['failed', 1],
      ['lease_lost', 1],
      ['unknown', 1],
    ]);
    // The timed-out complete() is an error with its SQLSTATE.
    expect(
      await otel.total(CALL, {
        'db.operation.name': 'settle.complete',
        'pg_settle.outcome': 'error',
        'db.response.status_code': '57014',
        'error.type': '57014',
      }),
    ).toBe(1);
    expect(
      await otel.total('pg_settle.outcomes', { 'pg_settle.operation': 'pg_settle.run', 'pg_settle.outcome': 'fenced' }),
    ).toBe(1);
  });

  it('counts transparent retries by SQLSTATE', async () => {
    // As in test/client/retry-and-parsing.test.ts: a REPEATABLE READ heartbeat loses a serialization race.
    const url = new URL(asRole(t.db.url, 'settle_app'));
    url.searchParams.set('options', '-c role=settle_app -c default_transaction_isolation=repeatable\\ read');
    const rr = createSettleClient({
      connectionString: url.toString(),
      poolSize: 1,
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
    });
    try {
      const key = uniqueKey();
      const claimed = await t.app.claim({ tenant, key, request: {}, binding });
      if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
      await t.su.query('begin');
      await t.su.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
        tenant,
        key,
      ]);
      const heartbeat = rr.heartbeat(claimed.attempt, { leaseMs: 60_000 });
      await waitFor(() => someoneWaitsOnLock(t.su));
      await t.su.query(
        'update settle_private.operations set updated_at = clock_timestamp() where tenant = $1 and key = $2',
        [tenant, key],
      );
      await t.su.query('commit');
      expect(await heartbeat).toMatchObject({ outcome: 'extended' });
    } finally {
      await t.su.query('rollback').catch(() => {});
      await rr.end();
    }
    const retries = (await otel.points()).filter((p) => p.name === 'pg_settle.client.retries');
    expect(
      retries.map((p) => [p.type, p.attributes['db.operation.name'], p.attributes['db.response.status_code']]),
    ).toEqual([['counter', 'settle.heartbeat', '40001']]);
    expect(retries[0]?.value).toBeGreaterThanOrEqual(1);
    // The call itself succeeded after the retry: one point, outcome extended.
    expect(await otel.total(CALL, { 'db.operation.name': 'settle.heartbeat', 'pg_settle.outcome': 'extended' })).toBe(
      1,
    );
  });

  it('runInTransaction() and reads are measured too; the HTTP middleware records through the client', async () => {
    const key = uniqueKey();
    expect(await client.runInTransaction(runInput(key), async () => 'in tx')).toMatchObject({ outcome: 'completed' });
    expect(await client.get({ tenant, key: uniqueKey(), request: {}, binding })).toEqual({ outcome: 'not_found' });
    recordHttpRequest(client, 'first');
    recordHttpRequest(client, 'replay');
    recordHttpRequest(client, 'replay');
    recordHttpRequest(client, '422');

    expect(
      await otel.total('pg_settle.outcomes', {
        'pg_settle.operation': 'pg_settle.run_in_transaction',
        'pg_settle.outcome': 'completed',
      }),
    ).toBe(1);
    expect(
      await otel.total('pg_settle.run.effect.duration', {
        'pg_settle.operation': 'pg_settle.run_in_transaction',
        'pg_settle.outcome': 'completed',
      }),
    ).toBe(1);
    expect(await otel.total(CALL, { 'db.operation.name': 'settle.get', 'pg_settle.outcome': 'not_found' })).toBe(1);
    const http = (await otel.points()).filter((p) => p.name === 'pg_settle.http.requests');
    expect(Object.fromEntries(http.map((p) => [p.attributes['pg_settle.http.result'], p.value]))).toEqual({
      first: 1,
      replay: 2,
      '422': 1,
    });
  });

  it('no key, lease token, principal or tenant in any attribute; the tenant only when opted in', async () => {
    const key = uniqueKey('secret-key');
    const handle = await client.claim(runInput(key, { worker: 'w-1' }));
    if (handle.outcome !== 'acquired') throw new Error('expected acquired');
    await client.complete(handle.attempt, 'r');
    const forbidden = [key, handle.attempt.leaseToken, binding.principal, tenant, 'w-1'];
    const values = [
      ...(await otel.points()).flatMap((p) => Object.values(p.attributes)),
      ...otel
        .spans()
        .flatMap((s) => [
          ...Object.values(s.attributes),
          ...s.events.flatMap((e) => Object.values(e.attributes ?? {})),
        ]),
    ].map(String);
    expect(values.filter((v) => forbidden.some((f) => v.includes(f)))).toEqual([]);

    const opted = createTestTelemetry();
    const withTenant = t.client({
      telemetry: { meterProvider: opted.meterProvider, tracerProvider: opted.tracerProvider, tenantAttribute: true },
    });
    await withTenant.run(runInput(uniqueKey()), async () => 'ok');
    expect(await opted.total(CALL, { 'pg_settle.tenant': tenant, 'db.operation.name': 'settle.claim' })).toBe(1);
    expect(
      await opted.total('pg_settle.outcomes', { 'pg_settle.tenant': tenant, 'pg_settle.operation': 'pg_settle.run' }),
    ).toBe(1);
    await opted.shutdown();
  });
});

describe('client spans', () => {
  it('one span per run() with attempt and outcome; the settle calls are its children', async () => {
    const key = uniqueKey();
    await client.run(runInput(key), async () => {
      throw new Error('first try fails');
    });
    await client.run(runInput(key), async () => 'second try');
    const spans = otel.spans();
    const runs = spans.filter((s) => s.name === 'pg_settle.run');
    expect(runs.map((s) => [s.attributes['pg_settle.attempt'], s.attributes['pg_settle.outcome']])).toEqual([
      [1, 'failed'],
      [2, 'completed'],
    ]);
    for (const run of runs) {
      const children = spans.filter((s) => s.parentSpanContext?.spanId === run.spanContext().spanId);
      expect(children.every((s) => s.spanContext().traceId === run.spanContext().traceId)).toBe(true);
      expect(children.map((s) => s.name)).toEqual([
        'settle.claim',
        run.attributes['pg_settle.outcome'] === 'failed' ? 'settle.fail' : 'settle.complete',
      ]);
      expect(children.every((s) => s.kind === 2 /* CLIENT */ && s.attributes['db.system.name'] === 'postgresql')).toBe(
        true,
      );
    }
    expect(spans.find((s) => s.name === 'settle.fail')?.attributes).toMatchObject({
      'pg_settle.outcome': 'recorded',
      'pg_settle.reason': 'retryable_failure',
    });
  });

  it('a settle call outside run() is a root span; a failed call carries its SQLSTATE', async () => {
    const admin = t.client({
      role: 'settle_app',
      telemetry: { meterProvider: otel.meterProvider, tracerProvider: otel.tracerProvider },
    });
    // settle_app may not call expire_leases: 42501.
    await expect(admin.expireLeases()).rejects.toMatchObject({ sqlstate: '42501' });
    const span = otel.spans().find((s) => s.name === 'settle.expire_leases');
    expect(span?.parentSpanContext).toBeUndefined();
    expect(span?.attributes).toMatchObject({
      'db.response.status_code': '42501',
      'error.type': '42501',
      'pg_settle.outcome': 'error',
    });
    expect(span?.status.code).toBe(2 /* ERROR */);
  });
});

describe('without telemetry', () => {
  it('telemetry: false is the no-op (no instruments are created)', () => {
    expect(createClientTelemetry(false)).toBe(NOOP_TELEMETRY);
    expect(createClientTelemetry({})).not.toBe(NOOP_TELEMETRY);
  });
});
