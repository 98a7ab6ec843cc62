import { sql } from 'slonik';
import { beforeEach, describe, expect, it } from 'vitest';
import {
  createSettleClient,
  EffectResultError,
  type RunInput,
  type RunOutcome,
  type SettleClient,
} from '../../src/index.js';
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

  it('unknown outcomes of run(): by source and reason, every reason of the source counted from 0 at the first run()', async () => {
    const unknowns = async (): Promise<(string | number)[][]> =>
      (await otel.points())
        .filter((p) => p.name === 'pg_settle.unknown_outcomes')
        .map((p) => [String(p.attributes['pg_settle.source']), String(p.attributes['pg_settle.reason']), p.value])
        .sort();
    expect(await unknowns()).toEqual([]);
    expect(await client.run(runInput(uniqueKey()), async () => 'paid')).toMatchObject({ outcome: 'completed' });
    // Started at 0, so that Prometheus' rate() sees the first one.
    expect(await unknowns()).toEqual([
      ['run', 'effect_outcome_unknown', 0],
      ['run', 'lineage_unproven', 0],
      ['run', 'needs_reconciliation', 0],
      ['run', 'reconcile_failed', 0],
      ['run', 'settle_call_failed', 0],
    ]);

    const key = uniqueKey();
    expect(
      await client.run(runInput(key, { classify: () => 'unknown' }), async () => {
        throw new Error('the provider timed out');
      }),
    ).toMatchObject({ outcome: 'unknown', reason: 'effect_outcome_unknown' });
    // A retry without reconcile runs nothing: still unknown, needs reconciliation.
    expect(await client.run(runInput(key), async () => 'never')).toMatchObject({
      outcome: 'unknown',
      reason: 'needs_reconciliation',
    });
    // The effect ran but its result cannot be stored: recorded unknown, and run() throws.
    await expect(
      client.run(runInput(uniqueKey()), async () => ({ receipt: () => 'not JSON' }) as never),
    ).rejects.toThrow(EffectResultError);
    expect(await unknowns()).toEqual([
      ['run', 'effect_outcome_unknown', 2],
      ['run', 'lineage_unproven', 0],
      ['run', 'needs_reconciliation', 1],
      ['run', 'reconcile_failed', 0],
      ['run', 'settle_call_failed', 0],
    ]);
  });

  it('runMany(): outcomes and effect durations per item, batch calls by their SQL names with their items by outcome', async () => {
    const items = [1, 2, 3].map((n) => ({ key: uniqueKey(), request: { n } }));
    const ran = await client.runMany(
      { tenant, binding, items, classify: () => 'unknown' },
      async ({ items: acquired }) =>
        acquired.map((item, i) =>
          i === 2
            ? { status: 'rejected' as const, reason: new Error('the provider timed out') }
            : { status: 'fulfilled' as const, value: { paid: item.key } },
        ),
    );
    expect(ran.map((o) => o.outcome)).toEqual(['completed', 'completed', 'unknown']);
    const again = await client.runMany({ tenant, binding, items: items.slice(0, 2) }, async () => []);
    expect(again.map((o) => o.outcome)).toEqual(['replay', 'replay']);

    const points = await otel.points();
    const of = (name: string, ...attributes: string[]) =>
      points
        .filter((p) => p.name === name)
        .map((p) => [...attributes.map((a) => String(p.attributes[a])), p.value])
        .sort();
    // One point per call, named as the SQL API spells the function.
    expect(of(CALL, 'db.operation.name', 'pg_settle.outcome')).toEqual([
      ['settle.claim_many', 'ok', 2],
      ['settle.complete_many', 'ok', 1],
      ['settle.report_unknown', 'recorded', 1],
    ]);
    // Their items, by the engine's answer for each.
    expect(of('pg_settle.batch.items', 'pg_settle.operation', 'pg_settle.outcome', 'pg_settle.reason')).toEqual([
      ['settle.claim_many', 'acquired', 'undefined', 3],
      ['settle.claim_many', 'replay', 'undefined', 2],
      ['settle.complete_many', 'settled', 'current_attempt', 2],
    ]);
    expect(points.find((p) => p.name === 'pg_settle.batch.items')?.unit).toBe('{item}');
    // runMany's outcomes and effect durations: one per item (the effect ran once, for 3 items).
    expect(
      of('pg_settle.outcomes', 'pg_settle.operation', 'pg_settle.outcome').filter(([o]) => o === 'pg_settle.run_many'),
    ).toEqual([
      ['pg_settle.run_many', 'completed', 2],
      ['pg_settle.run_many', 'replay', 2],
      ['pg_settle.run_many', 'unknown', 1],
    ]);
    expect(of('pg_settle.run.effect.duration', 'pg_settle.operation', 'pg_settle.outcome')).toEqual([
      ['pg_settle.run_many', 'completed', 2],
      ['pg_settle.run_many', 'unknown', 1],
    ]);
    const effectSums = points.filter((p) => p.name === 'pg_settle.run.effect.duration').map((p) => p.sum ?? 0);
    expect(effectSums.every((sum) => sum > 0)).toBe(true);
    expect(
      of('pg_settle.unknown_outcomes', 'pg_settle.source', 'pg_settle.reason').filter(([, , n]) => n !== 0),
    ).toEqual([['run_many', 'effect_outcome_unknown', 1]]);

    // A span per runMany(), parent of its batch calls.
    const spans = otel.spans();
    const batches = spans.filter((s) => s.name === 'pg_settle.run_many');
    expect(
      batches.map((s) => [
        s.attributes['pg_settle.batch.size'],
        s.attributes['pg_settle.batch.ran'],
        s.attributes['pg_settle.batch.unknown'],
        s.status.code,
      ]),
    ).toEqual([
      [3, 3, 1, 2 /* ERROR */],
      [2, 0, undefined, 0 /* UNSET */],
    ]);
    const first = batches[0]?.spanContext().spanId;
    expect(
      spans
        .filter((s) => s.parentSpanContext?.spanId === first)
        .map((s) => s.name)
        .sort(),
    ).toEqual(['settle.claim_many', 'settle.complete_many', 'settle.report_unknown']);
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
