import { AsyncLocalStorage } from 'node:async_hooks';
import { type Attributes, type Context, context, type ContextManager, ROOT_CONTEXT } from '@opentelemetry/api';
import {
  AggregationTemporality,
  type DataPoint,
  DataPointType,
  type Histogram,
  MeterProvider,
  MetricReader,
} from '@opentelemetry/sdk-metrics';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

/**
 * The AsyncLocalStorage context manager an application gets from @opentelemetry/sdk-node
 * (@opentelemetry/context-async-hooks), in its few lines: spans nest through it.
 */
class AsyncLocalStorageContextManager implements ContextManager {
  private readonly storage = new AsyncLocalStorage<Context>();
  active(): Context {
    return this.storage.getStore() ?? ROOT_CONTEXT;
  }
  with<A extends unknown[], F extends (...args: A) => ReturnType<F>>(
    ctx: Context,
    fn: F,
    thisArg?: ThisParameterType<F>,
    ...args: A
  ): ReturnType<F> {
    return this.storage.run(ctx, () => fn.call(thisArg, ...args));
  }
  bind<T>(ctx: Context, target: T): T {
    if (typeof target !== 'function') return target;
    const fn = target as unknown as (...args: unknown[]) => unknown;
    return ((...args: unknown[]) => this.with(ctx, () => fn(...args))) as unknown as T;
  }
  enable(): this {
    return this;
  }
  disable(): this {
    this.storage.disable();
    return this;
  }
}

let contextManagerRegistered = false;
/** Registers the context manager once per process (the global API refuses a second one). */
export function registerContextManager(): void {
  if (!contextManagerRegistered)
    contextManagerRegistered = context.setGlobalContextManager(new AsyncLocalStorageContextManager());
}

/** A pull reader of the real SDK: collect() is what an exporter would read on each scrape. */
class PullReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

export interface Point {
  readonly name: string;
  readonly unit: string;
  readonly type: 'counter' | 'histogram' | 'other';
  readonly attributes: Attributes;
  /** Counter value, or histogram count. */
  readonly value: number;
  readonly sum?: number;
}

export interface TestTelemetry {
  readonly meterProvider: MeterProvider;
  readonly tracerProvider: BasicTracerProvider;
  /** Every data point of every metric, cumulative since start. */
  points(): Promise<Point[]>;
  /** Finished spans. */
  spans(): ReadableSpan[];
  /** The sum of the values of points named `name` whose attributes include `match`. */
  total(name: string, match?: Attributes): Promise<number>;
  shutdown(): Promise<void>;
}

/** The real OpenTelemetry SDK (metrics and traces), in memory: no exporter process, no network. */
export function createTestTelemetry(): TestTelemetry {
  registerContextManager();
  const reader = new PullReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const points = async (): Promise<Point[]> => {
    const { resourceMetrics, errors } = await reader.collect();
    if (errors.length > 0) throw new Error(`metric collection failed: ${errors.map(String).join('; ')}`);
    return resourceMetrics.scopeMetrics.flatMap((scope) =>
      scope.metrics.flatMap((metric) =>
        (metric.dataPoints as DataPoint<number | Histogram>[]).map((point): Point => {
          const histogram = typeof point.value === 'object';
          const value = point.value;
          return {
            name: metric.descriptor.name,
            unit: metric.descriptor.unit,
            type: histogram
              ? 'histogram'
              : metric.dataPointType === DataPointType.SUM && metric.isMonotonic
                ? 'counter'
                : 'other',
            attributes: point.attributes,
            value: typeof value === 'object' ? value.count : value,
            ...(typeof value === 'object' ? { sum: value.sum ?? 0 } : {}),
          };
        }),
      ),
    );
  };
  return {
    meterProvider,
    tracerProvider,
    points,
    spans: () => exporter.getFinishedSpans(),
    async total(name, match = {}) {
      return (await points())
        .filter((p) => p.name === name && Object.entries(match).every(([k, v]) => p.attributes[k] === v))
        .reduce((sum, p) => sum + p.value, 0);
    },
    async shutdown() {
      await Promise.allSettled([meterProvider.shutdown(), tracerProvider.shutdown()]);
    },
  };
}
