import { performance } from 'node:perf_hooks';
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import { sql } from 'slonik';
import { createSettleClient, type SettleClient } from '../src/client/index.js';
import { startBenchServer } from './database.js';

/**
 * What recording OpenTelemetry costs the client (docs/observability.md, "Overhead measured").
 * Same-run A/B: one database, two clients with the same pool size, rounds alternating between
 * them (the order flips every round) so the machine's noise hits both alike:
 *
 * - `off`: `telemetry: false` (what an application without @opentelemetry/api gets: no-op hooks);
 * - `sdk`: the real SDK recording everything: a MeterProvider whose PeriodicExportingMetricReader
 *   exports every second (in memory), and a BasicTracerProvider sampling every span into a
 *   BatchSpanProcessor whose exporter counts them.
 *
 *   npx tsx bench/telemetry-overhead.ts [--clients 8] [--cycles 300] [--rounds 10]
 *
 * Each round runs `cycles` run() cycles per worker (claim, no-op effect, complete on a fresh key,
 * as the bench's `client` scenario) with `clients` concurrent workers, and reports cycles/s.
 * Prints every round and the median of the per-round ratios sdk/off; the drop must stay < 5%.
 */
function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const value = i < 0 ? undefined : Number(process.argv[i + 1]);
  return value === undefined || !Number.isFinite(value) ? fallback : value;
}

const clients = flag('clients', 8);
const cycles = flag('cycles', 300);
const rounds = flag('rounds', 10);
const log = (msg: string): void => void process.stderr.write(`[telemetry-overhead] ${msg}\n`);

class CountingSpanExporter implements SpanExporter {
  spans = 0;
  export(spans: ReadableSpan[], done: Parameters<SpanExporter['export']>[1]): void {
    this.spans += spans.length;
    done({ code: 0 });
  }
  async shutdown(): Promise<void> {}
  async forceFlush(): Promise<void> {}
}

interface Round {
  readonly perSecond: number;
  /** CPU (user + system) this Node process spent per cycle, in microseconds: the client's own cost. */
  readonly cpuUsPerCycle: number;
}

async function measure(client: SettleClient, arm: string, round: number): Promise<Round> {
  const started = performance.now();
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: clients }, async (_, worker) => {
      for (let i = 0; i < cycles; i += 1) {
        const key = `${arm}-${round}-${worker}-${i}`;
        const outcome = await client.run(
          { tenant: 'bench', key, request: { amount: i, currency: 'EUR' }, binding: { principal: 'bench-app', generation: 0 }, worker: 'node' },
          async () => ({ charge: key }),
        );
        if (outcome.outcome !== 'completed') throw new Error(`${arm}: run() of a fresh key answered ${outcome.outcome}`);
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return { perSecond: (clients * cycles) / ((performance.now() - started) / 1000), cpuUsPerCycle: (used.user + used.system) / (clients * cycles) };
}

const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? NaN) : ((sorted[mid - 1] ?? NaN) + (sorted[mid] ?? NaN)) / 2;
};

async function main(): Promise<void> {
  const server = await startBenchServer(log);
  const db = await server.createRunDatabase('telemetry_overhead');
  const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const meterProvider = new MeterProvider({
    readers: [new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 1000 })],
  });
  const spanExporter = new CountingSpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(spanExporter)] });
  const arms: Record<'off' | 'sdk', SettleClient> = {
    off: createSettleClient({ connectionString: db.url, poolSize: clients, telemetry: false }),
    sdk: createSettleClient({ connectionString: db.url, poolSize: clients, telemetry: { meterProvider, tracerProvider } }),
  };
  try {
    for (const client of Object.values(arms)) {
      const pool = await client.getPool();
      await Promise.all(Array.from({ length: clients }, () => pool.query(sql.unsafe`select 1`)));
    }
    // Warm-up (JIT, plans, prepared statements) of both arms, unmeasured.
    await measure(arms.off, 'warm-off', 0);
    await measure(arms.sdk, 'warm-sdk', 0);
    const rows: { round: number; off: number; sdk: number; ratio: number; offCpu: number; sdkCpu: number }[] = [];
    for (let round = 1; round <= rounds; round += 1) {
      const order: ('off' | 'sdk')[] = round % 2 === 1 ? ['off', 'sdk'] : ['sdk', 'off'];
      const result: Partial<Record<'off' | 'sdk', Round>> = {};
      for (const arm of order) result[arm] = await measure(arms[arm], arm, round);
      const off = result.off?.perSecond ?? NaN;
      const sdk = result.sdk?.perSecond ?? NaN;
      const row = { round, off, sdk, ratio: sdk / off, offCpu: result.off?.cpuUsPerCycle ?? NaN, sdkCpu: result.sdk?.cpuUsPerCycle ?? NaN };
      rows.push(row);
      log(`round ${round}: off ${off.toFixed(0)}/s, sdk ${sdk.toFixed(0)}/s, sdk/off ${row.ratio.toFixed(3)}; CPU/cycle off ${row.offCpu.toFixed(0)} us, sdk ${row.sdkCpu.toFixed(0)} us`);
    }
    await meterProvider.forceFlush();
    await tracerProvider.forceFlush();
    const recorded = metricExporter.getMetrics().at(-1)?.scopeMetrics.flatMap((s) => s.metrics.map((m) => m.descriptor.name)) ?? [];
    const ratio = median(rows.map((r) => r.ratio));
    process.stdout.write(
      [
        `# Client throughput with OpenTelemetry recording (sdk) vs without (off)`,
        '',
        `Command: npx tsx bench/telemetry-overhead.ts --clients ${clients} --cycles ${cycles} --rounds ${rounds}`,
        `Server: PostgreSQL ${server.serverVersion}; Node ${process.version}; ${clients} workers x ${cycles} run() cycles per round and arm`,
        '',
        '| round | off (cycles/s) | sdk (cycles/s) | sdk/off | Node CPU/cycle off (us) | sdk (us) |',
        '|---|---|---|---|---|---|',
        ...rows.map((r) => `| ${r.round} | ${r.off.toFixed(0)} | ${r.sdk.toFixed(0)} | ${r.ratio.toFixed(3)} | ${r.offCpu.toFixed(0)} | ${r.sdkCpu.toFixed(0)} |`),
        '',
        `Median sdk/off: ${ratio.toFixed(3)} (throughput drop ${((1 - ratio) * 100).toFixed(1)}%); median off ${median(rows.map((r) => r.off)).toFixed(0)}/s, sdk ${median(rows.map((r) => r.sdk)).toFixed(0)}/s.`,
        `Median Node CPU per cycle: off ${median(rows.map((r) => r.offCpu)).toFixed(0)} us, sdk ${median(rows.map((r) => r.sdkCpu)).toFixed(0)} us (the recording's own cost: ${(median(rows.map((r) => r.sdkCpu)) - median(rows.map((r) => r.offCpu))).toFixed(0)} us per cycle).`,
        `The sdk arm recorded metrics ${JSON.stringify([...new Set(recorded)].sort())} and exported ${spanExporter.spans} spans.`,
        '',
      ].join('\n'),
    );
  } finally {
    await Promise.allSettled([arms.off.end(), arms.sdk.end()]);
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
    await db.drop();
    await server.stop();
  }
}

await main();
