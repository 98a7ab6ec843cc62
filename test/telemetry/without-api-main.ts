// Run by without-api.test.ts in a child process where @opentelemetry/api cannot be resolved.
import { createSettleClient } from '../../src/index.js';
import { createClientTelemetry, loadOpenTelemetryApi, NOOP_TELEMETRY } from '../../src/client/telemetry.js';

const url = process.argv[2];
if (url === undefined) throw new Error('usage: without-api-main.ts <database url>');
const settle = createSettleClient({ connectionString: url, poolSize: 1 });
try {
  const outcome = await settle.run(
    { tenant: 'acme', key: `no-otel-${Date.now()}`, request: {}, binding: { principal: 'p', generation: 1 } },
    async () => 'ran',
  );
  process.stdout.write(
    `${JSON.stringify({ outcome: outcome.outcome, apiMissing: loadOpenTelemetryApi() === null, noop: createClientTelemetry(undefined) === NOOP_TELEMETRY })}\n`,
  );
} finally {
  await settle.end();
}
