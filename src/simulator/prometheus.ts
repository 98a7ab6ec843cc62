import type { ViewOptions } from '@opentelemetry/sdk-metrics';
import { type MeterProviderLike, SECONDS_HISTOGRAMS } from '../client/telemetry.js';

/**
 * A Prometheus `/metrics` endpoint for the client's OpenTelemetry metrics: the SDK's
 * MeterProvider with @opentelemetry/exporter-prometheus as its reader. Both packages are loaded
 * only when an endpoint is asked for (they are development dependencies of pg-settle: install
 * them in an application that wants the same).
 *
 * @opentelemetry/exporter-prometheus 0.2xx appends `_total` to counters but no unit suffix, where
 * the OpenTelemetry Collector and Prometheus' OTLP receiver do; the views below add `_seconds` to
 * the client's durations so the names are the same whichever way the metrics travel
 * (docs/observability.md).
 */
export interface MetricsEndpoint {
  /** Pass as `telemetry: { meterProvider }` to createSettleClient. */
  readonly meterProvider: MeterProviderLike;
  /** http://host:port/metrics */
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
}

export class MetricsEndpointUnavailableError extends Error {
  override readonly name = 'MetricsEndpointUnavailableError';
}

const SECONDS_VIEWS: readonly ViewOptions[] = SECONDS_HISTOGRAMS.map((name) => ({
  instrumentName: name,
  name: `${name}_seconds`,
}));

/** Starts serving `/metrics` on host:port (port 0: any free port). */
export async function startMetricsEndpoint(options: {
  readonly port: number;
  readonly host?: string;
}): Promise<MetricsEndpoint> {
  let sdk: typeof import('@opentelemetry/sdk-metrics');
  let prometheus: typeof import('@opentelemetry/exporter-prometheus');
  try {
    [sdk, prometheus] = await Promise.all([
      import('@opentelemetry/sdk-metrics'),
      import('@opentelemetry/exporter-prometheus'),
    ]);
  } catch (error) {
    throw new MetricsEndpointUnavailableError(
      'a metrics endpoint needs @opentelemetry/sdk-metrics and @opentelemetry/exporter-prometheus: npm install @opentelemetry/sdk-metrics@^2 @opentelemetry/exporter-prometheus@^0.223 next to pg-settle',
      { cause: error },
    );
  }
  const host = options.host ?? '127.0.0.1';
  const exporter = new prometheus.PrometheusExporter({ host, port: options.port, preventServerStart: true });
  await exporter.startServer();
  // With port 0 the exporter's server listens on a port chosen by the OS: read it back.
  const server = (exporter as unknown as { _server?: { address(): { port: number } | string | null } })._server;
  const address = server?.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  const meterProvider = new sdk.MeterProvider({ readers: [exporter], views: [...SECONDS_VIEWS] });
  return {
    meterProvider,
    port,
    url: `http://${host}:${port}/metrics`,
    async stop() {
      await meterProvider.shutdown();
      await exporter.stopServer().catch(() => {});
    },
  };
}
