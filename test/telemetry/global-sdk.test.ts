import { metrics, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import type { RunInput } from '../../src/index.js';
import { binding, useClientTest, uniqueKey } from '../client/helpers.js';
import { createTestTelemetry } from './sdk.js';

// A client with the default telemetry (no providers given) records through the GLOBAL providers.
// While none is registered it skips its hooks (no span, no no-op instruments: src/client/telemetry.ts,
// `dormant`); an SDK registered afterwards counts from its registration on. Own file: the global
// providers are per process (vitest runs each file in its own worker).

const t = useClientTest('telemetry_global');
const runInput = (key: string): RunInput => ({ tenant: 'acme', key, request: { amount: '5.00' }, binding });

describe('default telemetry and the global OpenTelemetry providers', () => {
  it('records nothing before an SDK registers, then every call after it registers', async () => {
    const client = t.client(); // no telemetry option: the global providers
    expect(await client.run(runInput(uniqueKey()), async () => 'before')).toMatchObject({ outcome: 'completed' });

    const otel = createTestTelemetry();
    expect(metrics.setGlobalMeterProvider(otel.meterProvider)).toBe(true);
    expect(trace.setGlobalTracerProvider(otel.tracerProvider)).toBe(true);
    try {
      const key = uniqueKey();
      expect(await client.run(runInput(key), async () => 'after')).toMatchObject({ outcome: 'completed' });
      expect(await client.run(runInput(key), async () => 'never')).toMatchObject({ outcome: 'replay' });

      // Only the two runs after the registration: claim (acquired), complete, claim (replay).
      const calls = (await otel.points()).filter((p) => p.name === 'db.client.operation.duration');
      expect(
        calls.map((p) => [p.attributes['db.operation.name'], p.attributes['pg_settle.outcome'], p.value]).sort(),
      ).toEqual([
        ['settle.claim', 'acquired', 1],
        ['settle.claim', 'replay', 1],
        ['settle.complete', 'settled', 1],
      ]);
      expect(await otel.total('pg_settle.outcomes', { 'pg_settle.operation': 'pg_settle.run' })).toBe(2);
      const spans = otel
        .spans()
        .map((span) => span.name)
        .sort();
      expect(spans).toEqual(['pg_settle.run', 'pg_settle.run', 'settle.claim', 'settle.claim', 'settle.complete']);
    } finally {
      metrics.disable();
      trace.disable();
      await otel.shutdown();
    }
  });
});
