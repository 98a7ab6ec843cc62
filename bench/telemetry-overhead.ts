import { performance } from 'node:perf_hooks';
import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import { sql } from 'slonik';
import { createSettleClient, type SettleClient } from '../src/client/index.js';
import { type ClientTelemetry, createClientTelemetry } from '../src/client/telemetry.js';
import { startBenchServer } from './lib/database.js';

/**
 * What recording OpenTelemetry costs the client (docs/observability.md, "Overhead measured").
 * Same-run A/B: one database, three clients with the same pool size, rounds rotating the order
 * between them so the machine's noise hits each alike:
 *
 * - `off`: `telemetry: false` (what an application without @opentelemetry/api gets: no-op hooks);
 * - `metrics`: the real metrics SDK recording: a MeterProvider whose PeriodicExportingMetricReader
 *   exports every second (in memory); spans not sampled;
 * - `sdk`: metrics as above, and a BasicTracerProvider sampling every span (3 per cycle) into a
 *   BatchSpanProcessor whose exporter counts them. No context manager is registered: its cost
 *   (an AsyncLocalStorage on every promise, on Node 20) is the application's choice, paid by all
 *   of its instrumentations alike.
 *
 *   npx tsx bench/telemetry-overhead.ts [--clients 8] [--cycles 300] [--rounds 10]
 *
 * Each round runs `cycles` run() cycles per worker (claim, no-op effect, complete on a fresh key,
 * as the bench's `client` scenario) with `clients` concurrent workers, and reports cycles/s.
 * Prints every round, the median of the per-round ratios (metrics/off, sdk/off), the Node CPU per
 * cycle, and the CPU of the hooks alone without a database (the recording's own cost).
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
          {
            tenant: 'bench',
            key,
            request: { amount: i, currency: 'EUR' },
            binding: { principal: 'bench-app', generation: 0 },
            worker: 'node',
          },
          async () => ({ charge: key }),
        );
        if (outcome.outcome !== 'completed')
          throw new Error(`${arm}: run() of a fresh key answered ${outcome.outcome}`);
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return {
    perSecond: (clients * cycles) / ((performance.now() - started) / 1000),
    cpuUsPerCycle: (used.user + used.system) / (clients * cycles),
  };
}

type Arm = 'off' | 'metrics' | 'sdk';

/**
 * The hooks alone, without a database: the telemetry of one run() cycle (the run, the effect, a
 * claim and a complete) driven `n` times; the process CPU per cycle in microseconds. This is the
 * recording's own cost, free of the database's noise.
 */
async function hookCpuUs(telemetry: ClientTelemetry, n: number): Promise<number> {
  const claimed = [{ outcome: 'acquired', reason: null }];
  const settled = [{ outcome: 'settled', reason: 'current_attempt' }];
  const cpu = process.cpuUsage();
  for (let i = 0; i < n; i += 1) {
    await telemetry.run('run', 'bench', async (timed) => {
      const effect = timed(async (_context: { readonly attempt: { readonly attempt: number } }) => i);
      await telemetry.call('claim', 'bench', async () => claimed);
      await effect({ attempt: { attempt: 1 } });
      await telemetry.call('complete', 'bench', async () => settled);
      return { outcome: 'completed', attempt: 1 };
    });
  }
  const used = process.cpuUsage(cpu);
  return (used.user + used.system) / n;
}
const ARMS: readonly Arm[] = ['off', 'metrics', 'sdk'];

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
  const metricsOnlyProvider = new MeterProvider({
    readers: [
      new PeriodicExportingMetricReader({
        exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
        exportIntervalMillis: 1000,
      }),
    ],
  });
  const arms: Record<Arm, SettleClient> = {
    off: createSettleClient({ connectionString: db.url, poolSize: clients, telemetry: false }),
    metrics: createSettleClient({
      connectionString: db.url,
      poolSize: clients,
      telemetry: { meterProvider: metricsOnlyProvider },
    }),
    sdk: createSettleClient({
      connectionString: db.url,
      poolSize: clients,
      telemetry: { meterProvider, tracerProvider },
    }),
  };
  try {
    for (const client of Object.values(arms)) {
      const pool = await client.getPool();
      await Promise.all(Array.from({ length: clients }, () => pool.query(sql.unsafe`select 1`)));
    }
    // Warm-up (JIT, plans, prepared statements) of both arms, unmeasured.
    const hooks: Record<Arm, ClientTelemetry> = {
      off: createClientTelemetry(false),
      metrics: createClientTelemetry({ meterProvider: metricsOnlyProvider }),
      sdk: createClientTelemetry({ meterProvider, tracerProvider }),
    };
    const hookCpu: Record<Arm, number[]> = { off: [], metrics: [], sdk: [] };
    for (let round = 0; round < 4; round += 1)
      for (const arm of ARMS) hookCpu[arm].push(await hookCpuUs(hooks[arm], 20_000));
    log(
      `hooks alone, CPU per cycle: ${ARMS.map((a) => `${a} ${median(hookCpu[a].slice(1)).toFixed(1)} us`).join(', ')}`,
    );
    for (const arm of ARMS) await measure(arms[arm], `warm-${arm}`, 0);
    const rows: Record<Arm, Round>[] = [];
    for (let round = 1; round <= rounds; round += 1) {
      const order = ARMS.map((_, i) => ARMS[(i + round) % ARMS.length] as Arm);
      const result: Partial<Record<Arm, Round>> = {};
      for (const arm of order) result[arm] = await measure(arms[arm], arm, round);
      const row = result as Record<Arm, Round>;
      rows.push(row);
      log(
        `round ${round}: ${ARMS.map((a) => `${a} ${row[a].perSecond.toFixed(0)}/s ${row[a].cpuUsPerCycle.toFixed(0)} us`).join(', ')}`,
      );
    }
    await meterProvider.forceFlush();
    await tracerProvider.forceFlush();
    const recorded =
      metricExporter
        .getMetrics()
        .at(-1)
        ?.scopeMetrics.flatMap((s) => s.metrics.map((m) => m.descriptor.name)) ?? [];
    const ratio = (arm: Arm): number => median(rows.map((r) => r[arm].perSecond / r.off.perSecond));
    const cpu = (arm: Arm): number => median(rows.map((r) => r[arm].cpuUsPerCycle));
    const rate = (arm: Arm): number => median(rows.map((r) => r[arm].perSecond));
    process.stdout.write(
      [
        `# Client throughput with OpenTelemetry recording (sdk) vs without (off)`,
        '',
        `Command: npx tsx bench/telemetry-overhead.ts --clients ${clients} --cycles ${cycles} --rounds ${rounds}`,
        `Server: PostgreSQL ${server.serverVersion}; Node ${process.version}; ${clients} workers x ${cycles} run() cycles per round and arm`,
        '',
        '| round | off (cycles/s) | metrics | sdk | metrics/off | sdk/off | Node CPU/cycle off (us) | metrics | sdk |',
        '|---|---|---|---|---|---|---|---|---|',
        ...rows.map(
          (r, i) =>
            `| ${i + 1} | ${r.off.perSecond.toFixed(0)} | ${r.metrics.perSecond.toFixed(0)} | ${r.sdk.perSecond.toFixed(0)} | ${(r.metrics.perSecond / r.off.perSecond).toFixed(3)} | ${(r.sdk.perSecond / r.off.perSecond).toFixed(3)} | ${r.off.cpuUsPerCycle.toFixed(0)} | ${r.metrics.cpuUsPerCycle.toFixed(0)} | ${r.sdk.cpuUsPerCycle.toFixed(0)} |`,
        ),
        '',
        `Median of the per-round ratios: metrics/off ${ratio('metrics').toFixed(3)} (throughput drop ${((1 - ratio('metrics')) * 100).toFixed(1)}%), sdk/off ${ratio('sdk').toFixed(3)} (drop ${((1 - ratio('sdk')) * 100).toFixed(1)}%); median cycles/s off ${rate('off').toFixed(0)}, metrics ${rate('metrics').toFixed(0)}, sdk ${rate('sdk').toFixed(0)}.`,
        `The hooks alone (no database; median of 3 rounds of 20,000 cycles after a warm-up round): ${ARMS.map((a) => `${a} ${median(hookCpu[a].slice(1)).toFixed(1)} us`).join(', ')} of CPU per run() cycle.`,
        `Median Node CPU per cycle: off ${cpu('off').toFixed(0)} us, metrics ${cpu('metrics').toFixed(0)} us (+${(cpu('metrics') - cpu('off')).toFixed(0)}), sdk ${cpu('sdk').toFixed(0)} us (+${(cpu('sdk') - cpu('off')).toFixed(0)}).`,
        `The sdk arm recorded metrics ${JSON.stringify([...new Set(recorded)].sort())} and exported ${spanExporter.spans} spans.`,
        '',
      ].join('\n'),
    );
  } finally {
    await Promise.allSettled(ARMS.map((arm) => arms[arm].end()));
    await metricsOnlyProvider.shutdown();
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
    await db.drop();
    await server.stop();
  }
}

await main();
