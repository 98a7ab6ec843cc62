import { createServer } from 'node:http';
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
  // The exporter's own server cannot take port 0 (it reads 0 as "unset" and binds its default,
  // 9464): the endpoint listens itself and hands /metrics to the exporter's request handler.
  const exporter = new prometheus.PrometheusExporter({ preventServerStart: true });
  const server = createServer((request, response) => {
    if (request.method === 'GET' && new URL(request.url ?? '/', 'http://localhost').pathname === '/metrics') {
      exporter.getMetricsRequestHandler(request, response);
      return;
    }
    response.statusCode = 404;
    response.end('not found: the metrics are at /metrics\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: options.port, host }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.unref();
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  const meterProvider = new sdk.MeterProvider({ readers: [exporter], views: [...SECONDS_VIEWS] });
  return {
    meterProvider,
    port,
    url: `http://${host}:${port}/metrics`,
    async stop() {
      await meterProvider.shutdown();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
