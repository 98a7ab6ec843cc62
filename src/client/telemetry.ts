import { createRequire } from 'node:module';
import type * as otel from '@opentelemetry/api';
import { EffectResultError, SettleError } from './errors.js';
import type { TelemetryOptions } from './types.js';

// OpenTelemetry metrics and spans of the client (docs/observability.md lists every name).
//
// @opentelemetry/api is an OPTIONAL peer dependency: it is required lazily, once, when the first
// client that wants telemetry is created. Without it (or with `telemetry: false`) every hook below
// is the no-op NOOP_TELEMETRY and costs one function call. With it but without an SDK, the API's
// own no-op meter and non-recording spans apply.
//
// Attributes are low-cardinality by construction: the SQL function, the engine's outcome and
// reason, a SQLSTATE. Never a key, lease token or principal; the tenant only when the application
// opts in with `telemetry: { tenantAttribute: true }`.

export type { MeterProviderLike, TelemetryOptions, TracerProviderLike } from './types.js';

/**
 * What the HTTP middleware answered: `first` (the handler's own response), `replay` (a stored
 * response), or the status of a refusal it answered itself (400, 409, 422, 500, 503, ...).
 */
export type HttpRequestResult = 'first' | 'replay' | 'misconfigured' | `${number}`;

/** What became of an effect (a run()'s, a runMany() item's, an HTTP handler's). */
export type EffectOutcome = 'completed' | 'failed' | 'unknown' | 'lease_lost' | 'conflict' | 'error';

/**
 * Why the HTTP middleware left a request's outcome unknown: the handler timed out or failed
 * without a response, the response policy classed its response unknown (504 by default), the
 * settle call after it failed ambiguously (or was refused), or the key was already in doubt.
 */
export type HttpUnknownReason =
  | 'handler_timeout'
  | 'handler_error'
  | 'response_policy'
  | 'settle_call_failed'
  | 'needs_reconciliation';

/** The timings and verdicts of one request the HTTP middleware answered, beyond its result. */
export interface HttpRequestDetails {
  /** Seconds the middleware itself took: the whole request less the handler's own time. */
  readonly middlewareSeconds?: number;
  /** Lease mode, the handler ran: its seconds and what became of its effect. */
  readonly handler?: { readonly seconds: number; readonly outcome: EffectOutcome };
  /** The middleware left the request's outcome unknown. */
  readonly unknown?: HttpUnknownReason;
}

/** Where an unknown outcome arose: the `pg_settle.source` attribute of pg_settle.unknown_outcomes. */
export type UnknownSource = 'run' | 'run_in_transaction' | 'run_many' | 'http';

/** A transparent retry as the client reports it (typed structurally). */
interface RetryEventLike {
  readonly operation: string;
  readonly retry: number;
  readonly delayMs: number;
  readonly error: Error;
}

/** The outcomes of run() the telemetry reads (structurally: run.ts stays free of telemetry). */
interface RunOutcomeLike {
  readonly outcome: string;
  readonly attempt?: number;
  readonly settledAttempt?: number;
  readonly settledBy?: string;
  readonly final?: boolean;
  readonly deadLettered?: boolean;
  readonly reason?: string;
}

export type RunKind = 'run' | 'run_in_transaction';

/** Returns the effect wrapped so that its duration and attempt are recorded. */
export type EffectTimer = <F extends (context: never) => Promise<unknown>>(effect: F) => F;

/** Returns runMany's effect wrapped so that its duration and the items it got (`context.items`) are recorded. */
export type BatchEffectTimer = EffectTimer;

/**
 * The reasons of an unknown outcome of run(), runInTransaction() or a runMany() item (UnknownReason):
 * closed sets, so that every series of a source can start at 0.
 */
const RUN_UNKNOWN_REASONS = [
  'effect_outcome_unknown',
  'settle_call_failed',
  'needs_reconciliation',
  'reconcile_failed',
  'lineage_unproven',
] as const;
const HTTP_UNKNOWN_REASONS: readonly HttpUnknownReason[] = [
  'handler_timeout',
  'handler_error',
  'response_policy',
  'settle_call_failed',
  'needs_reconciliation',
];
/** The reasons pg_settle.unknown_outcomes counts, per source (docs/observability.md). */
export const UNKNOWN_REASONS: Readonly<Record<UnknownSource, readonly string[]>> = {
  run: RUN_UNKNOWN_REASONS,
  run_in_transaction: RUN_UNKNOWN_REASONS,
  run_many: RUN_UNKNOWN_REASONS,
  http: HTTP_UNKNOWN_REASONS,
};

/** The hooks the client calls. */
export interface ClientTelemetry {
  /** Wraps one settle call (all its transparent retries): duration, outcome, span. */
  call<R>(operation: string, tenant: string | undefined, execute: () => Promise<R>): Promise<R>;
  /** One transparent retry (from the retry policy's onRetry). */
  retry(event: RetryEventLike): void;
  /** Wraps run()/runInTransaction(): `execute` gets `wrap`, which times the effect. */
  run<O extends RunOutcomeLike>(kind: RunKind, tenant: string, execute: (timed: EffectTimer) => Promise<O>): Promise<O>;
  /** Wraps runMany(): `execute` gets `wrap`, which times the effect; outcomes are counted per item. */
  runMany<O extends RunOutcomeLike>(
    tenant: string,
    items: number,
    execute: (timed: BatchEffectTimer) => Promise<O[]>,
  ): Promise<O[]>;
  /** One request answered by the HTTP middleware. */
  http(result: HttpRequestResult, details?: HttpRequestDetails): void;
  /** Starts the pg_settle.unknown_outcomes series of `source` at 0 (once; later calls do nothing). */
  primeUnknowns(source: UnknownSource): void;
  /** A handler failed after its response was complete (the response stands; the error is not sent). */
  httpErrorAfterResponse(): void;
  /** Wraps one batch of the feed consumer's handler: span, events counter, lag histogram. */
  feedBatch<R>(
    consumer: string,
    events: readonly { readonly occurredAt: Date }[],
    execute: () => Promise<R>,
  ): Promise<R>;
}

/** The effect as given: no timing. */
const untimed: EffectTimer = (effect) => effect;

export const NOOP_TELEMETRY: ClientTelemetry = {
  call: (_operation, _tenant, execute) => execute(),
  retry: () => {},
  run: (_kind, _tenant, execute) => execute(untimed),
  runMany: (_tenant, _items, execute) => execute(untimed),
  http: () => {},
  primeUnknowns: () => {},
  httpErrorAfterResponse: () => {},
  feedBatch: (_consumer, _events, execute) => execute(),
};

export const INSTRUMENTATION_SCOPE = 'pg-settle';
const SCOPE_VERSION = '0.1.0';

/** Metric names (OpenTelemetry form; docs/observability.md gives the Prometheus form). */
export const METRICS = {
  callDuration: 'db.client.operation.duration',
  outcomes: 'pg_settle.outcomes',
  retries: 'pg_settle.client.retries',
  effectDuration: 'pg_settle.run.effect.duration',
  unknownOutcomes: 'pg_settle.unknown_outcomes',
  batchItems: 'pg_settle.batch.items',
  httpRequests: 'pg_settle.http.requests',
  httpMiddlewareDuration: 'pg_settle.http.middleware.duration',
  httpErrorsAfterResponse: 'pg_settle.http.errors_after_response',
  feedEvents: 'pg_settle.feed.events',
  feedLag: 'pg_settle.feed.delivery_lag',
} as const;

/**
 * The duration histograms (unit s): a Prometheus exporter that adds no unit suffix (exporter-prometheus
 * 0.2xx) is given views that add `_seconds`, so the names match the OTLP route's (src/simulator/prometheus.ts).
 */
export const SECONDS_HISTOGRAMS: readonly string[] = [
  METRICS.callDuration,
  METRICS.effectDuration,
  METRICS.httpMiddlewareDuration,
  METRICS.feedLag,
  // The reconciler's (src/client/reconcile.ts, RECONCILER_METRICS.checkDuration).
  'pg_settle.reconciler.check.duration',
];

/** OpenTelemetry's recommended buckets for db.client.operation.duration (seconds). */
const CALL_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10];
/** Effects are calls to other systems: milliseconds to minutes. */
const EFFECT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];

/** A duration histogram in seconds with explicit bucket boundaries. */
function seconds(meter: otel.Meter, name: string, description: string, buckets: number[]): otel.Histogram {
  return meter.createHistogram(name, { description, unit: 's', advice: { explicitBucketBoundaries: buckets } });
}

type Api = typeof otel;
let api: Api | null | undefined;

/** @opentelemetry/api if the application installed it, else null (looked up once). */
export function loadOpenTelemetryApi(): Api | null {
  if (api !== undefined) return api;
  try {
    api = createRequire(import.meta.url)('@opentelemetry/api') as Api;
  } catch {
    api = null;
  }
  return api;
}

/** The telemetry of a client: NOOP_TELEMETRY when disabled or when @opentelemetry/api is absent. */
export function createClientTelemetry(options: TelemetryOptions | false | undefined): ClientTelemetry {
  if (options === false) return NOOP_TELEMETRY;
  const loaded = loadOpenTelemetryApi();
  return loaded === null ? NOOP_TELEMETRY : new OtelTelemetry(loaded, options ?? {});
}

interface Instruments {
  readonly callDuration: otel.Histogram;
  readonly outcomes: otel.Counter;
  readonly retries: otel.Counter;
  readonly effectDuration: otel.Histogram;
  readonly unknownOutcomes: otel.Counter;
  readonly batchItems: otel.Counter;
  readonly httpRequests: otel.Counter;
  readonly httpMiddlewareDuration: otel.Histogram;
  readonly httpErrorsAfterResponse: otel.Counter;
  readonly feedEvents: otel.Counter;
  readonly feedLag: otel.Histogram;
  readonly tracer: otel.Tracer;
}

// Spans nest through OpenTelemetry's own context (api.context.with): the run's span is the
// active context while run() works, so its settle calls (and the effect's own spans) are its
// children wherever the application registered a context manager (@opentelemetry/sdk-node
// registers the AsyncLocalStorage one). The client keeps no async context of its own: on Node 20
// an AsyncLocalStorage in use slows every promise of the process.

/** One level of the attribute cache: the next level by one part, or (last) the attribute set. */
type AttributeLevel = Map<string | undefined, unknown>;

class OtelTelemetry implements ClientTelemetry {
  private instruments: Instruments | undefined;
  private readonly attributeCache: AttributeLevel = new Map();
  /** Sources whose pg_settle.unknown_outcomes series were started at 0. */
  private readonly primed = new Set<UnknownSource>();
  private cachedAttributes = 0;
  /** The global MeterProvider seen to hand out the API's no-op meter (nothing registered). */
  private noopMeterProvider: otel.MeterProvider | undefined;

  constructor(
    private readonly api: Api,
    private readonly options: TelemetryOptions,
  ) {}

  /**
   * True while nothing could see what the hooks record: no providers were given, the global
   * MeterProvider is the API's no-op (its meter is createNoopMeter()'s) and the global
   * TracerProvider is the API's proxy without a delegate (its spans would not record). The hooks
   * then run the call bare: no span, no context lookup, no no-op instrument calls (about 5 us per
   * settle call and 8 us per run() on this machine, a tenth of run()'s own CPU). Checked on every
   * call, so an SDK registered later counts from its registration on; once the instruments exist
   * (an SDK was seen) it is never dormant again, as before.
   */
  private dormant(): boolean {
    if (
      this.instruments !== undefined ||
      this.options.meterProvider !== undefined ||
      this.options.tracerProvider !== undefined
    )
      return false;
    const meterProvider = this.api.metrics.getMeterProvider();
    if (meterProvider !== this.noopMeterProvider) {
      if (meterProvider.getMeter(INSTRUMENTATION_SCOPE, SCOPE_VERSION) !== this.api.createNoopMeter()) return false;
      this.noopMeterProvider = meterProvider;
    }
    // ProxyTracerProvider (the API's global until an SDK registers, and its wrapper after):
    // getDelegateTracer answers undefined exactly while no SDK provider is behind it.
    const tracerProvider = this.api.trace.getTracerProvider() as {
      getDelegateTracer?: (name: string, version?: string) => unknown;
    };
    return (
      typeof tracerProvider.getDelegateTracer === 'function' &&
      tracerProvider.getDelegateTracer(INSTRUMENTATION_SCOPE, SCOPE_VERSION) === undefined
    );
  }

  /** Instruments are created at the first call, so an SDK registered after createSettleClient still counts. */
  private get i(): Instruments {
    if (this.instruments !== undefined) return this.instruments;
    const meterProvider =
      (this.options.meterProvider as otel.MeterProvider | undefined) ?? this.api.metrics.getMeterProvider();
    const tracerProvider =
      (this.options.tracerProvider as otel.TracerProvider | undefined) ?? this.api.trace.getTracerProvider();
    const meter = meterProvider.getMeter(INSTRUMENTATION_SCOPE, SCOPE_VERSION);
    this.instruments = {
      callDuration: seconds(
        meter,
        METRICS.callDuration,
        'Duration of settle calls (one SQL function call, transparent retries included).',
        CALL_BUCKETS,
      ),
      outcomes: meter.createCounter(METRICS.outcomes, {
        description: 'Answers of settle calls and of run()/runInTransaction(), by operation, outcome and reason.',
        unit: '{outcome}',
      }),
      retries: meter.createCounter(METRICS.retries, {
        description: 'Transparent retries of settle calls after a transient error (40001, 40P01, 55P03), by SQLSTATE.',
        unit: '{retry}',
      }),
      effectDuration: seconds(
        meter,
        METRICS.effectDuration,
        "Duration of the effect of run(), runInTransaction(), runMany() (per item) and of the HTTP middleware's handler, by what ran it and what became of it (completed, failed, unknown, lease_lost, ...).",
        EFFECT_BUCKETS,
      ),
      unknownOutcomes: meter.createCounter(METRICS.unknownOutcomes, {
        description:
          'Outcomes left unknown (an effect may have happened), by where (run, run_in_transaction, run_many, http) and why.',
        unit: '{outcome}',
      }),
      batchItems: meter.createCounter(METRICS.batchItems, {
        description: "Items of settle.claim_many and settle.complete_many calls, by the engine's answer for each item.",
        unit: '{item}',
      }),
      httpRequests: meter.createCounter(METRICS.httpRequests, {
        description: 'Requests answered by the idempotency middleware, by result (first, replay, 400, 409, 422).',
        unit: '{request}',
      }),
      httpMiddlewareDuration: seconds(
        meter,
        METRICS.httpMiddlewareDuration,
        "Time the idempotency middleware added to a request (the whole request less its handler's own time), by result.",
        CALL_BUCKETS,
      ),
      httpErrorsAfterResponse: meter.createCounter(METRICS.httpErrorsAfterResponse, {
        description:
          'Handlers of the idempotency middleware that failed after their response was complete (the response stood; the error was not sent).',
        unit: '{error}',
      }),
      feedEvents: meter.createCounter(METRICS.feedEvents, {
        description:
          'Feed events handed to a consumer handler, by consumer and result (acknowledged as part of a batch that completed, or error).',
        unit: '{event}',
      }),
      feedLag: seconds(
        meter,
        METRICS.feedLag,
        'Seconds from an outcome being written to its delivery to a consumer handler (the feed lag), per event.',
        EFFECT_BUCKETS,
      ),
      tracer: tracerProvider.getTracer(INSTRUMENTATION_SCOPE, SCOPE_VERSION),
    };
    return this.instruments;
  }

  /**
   * Attribute sets are cached: a handful of operations x outcomes (x tenants, if opted in), by
   * their parts in nested maps (a key string built per call cost more than the lookups).
   */
  private attributes(
    kind: string,
    a: string | undefined,
    b: string | undefined,
    c: string | undefined,
    d: string | undefined,
    build: () => otel.Attributes,
  ): otel.Attributes {
    const level = this.level(this.level(this.level(this.level(this.attributeCache, kind), a), b), c);
    let attributes = level.get(d) as otel.Attributes | undefined;
    if (attributes === undefined) {
      attributes = Object.freeze(build());
      if (this.cachedAttributes < 10_000) {
        level.set(d, attributes);
        this.cachedAttributes += 1;
      }
    }
    return attributes;
  }

  private level(map: AttributeLevel, part: string | undefined): AttributeLevel {
    let next = map.get(part) as AttributeLevel | undefined;
    if (next === undefined) {
      next = new Map();
      if (this.cachedAttributes < 10_000) map.set(part, next);
    }
    return next;
  }

  private tenant(tenant: string | undefined): string | undefined {
    return this.options.tenantAttribute === true ? tenant : undefined;
  }

  call<R>(operation: string, tenant: string | undefined, execute: () => Promise<R>): Promise<R> {
    return this.dormant() ? execute() : this.recordCall(operation, tenant, execute);
  }

  private async recordCall<R>(operation: string, tenant: string | undefined, execute: () => Promise<R>): Promise<R> {
    const i = this.i;
    const name = sqlName(operation);
    const shownTenant = this.tenant(tenant);
    const parentContext = this.api.context.active();
    const span = i.tracer.startSpan(
      name,
      {
        kind: this.api.SpanKind.CLIENT,
        attributes: this.attributes('s', name, shownTenant, undefined, undefined, () => ({
          'db.system.name': 'postgresql',
          'db.operation.name': name,
          ...(shownTenant === undefined ? {} : { 'pg_settle.tenant': shownTenant }),
        })),
      },
      parentContext,
    );
    const recording = span.isRecording();
    const started = performance.now();
    let outcome = 'error';
    let reason: string | undefined;
    let sqlstate: string | undefined;
    let errorType: string | undefined;
    try {
      const result = recording
        ? await this.api.context.with(this.api.trace.setSpan(parentContext, span), execute)
        : await execute();
      [outcome, reason] = outcomeOf(name, result);
      if (BATCH_OPERATIONS.has(name) && Array.isArray(result)) this.countItems(i, name, result, shownTenant);
      return result;
    } catch (error) {
      sqlstate = error instanceof SettleError && error.sqlstate !== null ? error.sqlstate : undefined;
      errorType =
        sqlstate ?? (error instanceof SettleError ? error.code : error instanceof Error ? error.name : 'Error');
      if (recording) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: errorType });
      }
      throw error;
    } finally {
      const seconds = (performance.now() - started) / 1000;
      i.callDuration.record(
        seconds,
        this.attributes('d', name, outcome, errorType, shownTenant, () => ({
          'db.system.name': 'postgresql',
          'db.operation.name': name,
          'pg_settle.outcome': outcome,
          ...(sqlstate === undefined ? {} : { 'db.response.status_code': sqlstate }),
          ...(errorType === undefined ? {} : { 'error.type': errorType }),
          ...(shownTenant === undefined ? {} : { 'pg_settle.tenant': shownTenant }),
        })),
      );
      i.outcomes.add(1, this.outcomeAttributes(name, outcome, reason, shownTenant));
      if (recording) {
        span.setAttribute('pg_settle.outcome', outcome);
        if (reason !== undefined) span.setAttribute('pg_settle.reason', reason);
        if (sqlstate !== undefined) span.setAttribute('db.response.status_code', sqlstate);
        if (errorType !== undefined) span.setAttribute('error.type', errorType);
      }
      span.end();
    }
  }

  /** pg_settle.batch.items: one per row of a batch call, by the engine's answer for that item. */
  private countItems(i: Instruments, operation: string, rows: readonly unknown[], tenant: string | undefined): void {
    const counts = new Map<otel.Attributes, number>();
    for (const row of rows) {
      const { outcome, reason } = (row ?? {}) as { readonly outcome?: unknown; readonly reason?: unknown };
      const attributes = this.attributes(
        'b',
        operation,
        typeof outcome === 'string' ? outcome : 'ok',
        typeof reason === 'string' ? reason : undefined,
        tenant,
        () => ({
          'pg_settle.operation': operation,
          'pg_settle.outcome': typeof outcome === 'string' ? outcome : 'ok',
          ...(typeof reason === 'string' ? { 'pg_settle.reason': reason } : {}),
          ...(tenant === undefined ? {} : { 'pg_settle.tenant': tenant }),
        }),
      );
      counts.set(attributes, (counts.get(attributes) ?? 0) + 1);
    }
    for (const [attributes, count] of counts) i.batchItems.add(count, attributes);
  }

  /**
   * pg_settle.unknown_outcomes starts every series of `source` at 0 the first time the source is
   * used: Prometheus' rate() and increase() need a sample before the first increment, or the
   * first unknown outcome of a process would never show (nor fire PgSettleUnknownOutcomes).
   */
  private prime(i: Instruments, source: UnknownSource): void {
    if (this.primed.has(source)) return;
    this.primed.add(source);
    for (const reason of UNKNOWN_REASONS[source]) i.unknownOutcomes.add(0, this.unknownAttributes(source, reason));
  }

  primeUnknowns(source: UnknownSource): void {
    if (!this.dormant()) this.prime(this.i, source);
  }

  private unknownAttributes(source: UnknownSource, reason: string): otel.Attributes {
    return this.attributes('u', source, reason, undefined, undefined, () => ({
      'pg_settle.source': source,
      'pg_settle.reason': reason,
    }));
  }

  private countUnknown(i: Instruments, source: UnknownSource, reason: string): void {
    i.unknownOutcomes.add(1, this.unknownAttributes(source, reason));
  }

  private recordEffect(
    i: Instruments,
    operation: string,
    outcome: string,
    seconds: number,
    tenant: string | undefined,
  ): void {
    const effectOutcome = EFFECT_OUTCOME[outcome] ?? outcome;
    i.effectDuration.record(
      seconds,
      this.attributes('e', operation, effectOutcome, tenant, undefined, () => ({
        'pg_settle.operation': operation,
        'pg_settle.outcome': effectOutcome,
        ...(tenant === undefined ? {} : { 'pg_settle.tenant': tenant }),
      })),
    );
  }

  private outcomeAttributes(
    operation: string,
    outcome: string,
    reason: string | undefined,
    tenant: string | undefined,
  ): otel.Attributes {
    return this.attributes('o', operation, outcome, reason, tenant, () => ({
      'pg_settle.operation': operation,
      'pg_settle.outcome': outcome,
      ...(reason === undefined ? {} : { 'pg_settle.reason': reason }),
      ...(tenant === undefined ? {} : { 'pg_settle.tenant': tenant }),
    }));
  }

  async feedBatch<R>(
    consumer: string,
    events: readonly { readonly occurredAt: Date }[],
    execute: () => Promise<R>,
  ): Promise<R> {
    if (this.dormant()) return execute();
    const i = this.i;
    const now = Date.now();
    const attributes = this.attributes('f', consumer, undefined, undefined, undefined, () => ({
      'pg_settle.consumer': consumer,
    }));
    for (const event of events) i.feedLag.record(Math.max(0, (now - event.occurredAt.getTime()) / 1000), attributes);
    const parentContext = this.api.context.active();
    const span = i.tracer.startSpan(
      'pg_settle.feed.batch',
      {
        kind: this.api.SpanKind.CONSUMER,
        attributes: { 'pg_settle.consumer': consumer, 'messaging.batch.message_count': events.length },
      },
      parentContext,
    );
    let result = 'ok';
    try {
      return span.isRecording()
        ? await this.api.context.with(this.api.trace.setSpan(parentContext, span), execute)
        : await execute();
    } catch (error) {
      result = 'error';
      span.recordException(error instanceof Error ? error : String(error));
      span.setStatus({ code: this.api.SpanStatusCode.ERROR });
      throw error;
    } finally {
      i.feedEvents.add(
        events.length,
        this.attributes('fe', consumer, result, undefined, undefined, () => ({
          'pg_settle.consumer': consumer,
          'pg_settle.result': result,
        })),
      );
      span.end();
    }
  }

  retry(event: RetryEventLike): void {
    if (this.dormant()) return;
    const name = sqlName(event.operation);
    const sqlstate =
      event.error instanceof SettleError && event.error.sqlstate !== null
        ? event.error.sqlstate
        : (event.error.name ?? 'Error');
    this.i.retries.add(
      1,
      this.attributes('r', name, sqlstate, undefined, undefined, () => ({
        'db.system.name': 'postgresql',
        'db.operation.name': name,
        'db.response.status_code': sqlstate,
      })),
    );
    const span = this.api.trace.getSpan(this.api.context.active());
    if (span !== undefined && span.isRecording()) {
      span.addEvent('retry', {
        'db.response.status_code': sqlstate,
        'pg_settle.retry': event.retry,
        'pg_settle.delay_ms': event.delayMs,
      });
    }
  }

  run<O extends RunOutcomeLike>(
    kind: RunKind,
    tenant: string,
    execute: (timed: EffectTimer) => Promise<O>,
  ): Promise<O> {
    return this.dormant() ? execute(untimed) : this.recordRun(kind, tenant, execute);
  }

  private async recordRun<O extends RunOutcomeLike>(
    kind: RunKind,
    tenant: string,
    execute: (timed: EffectTimer) => Promise<O>,
  ): Promise<O> {
    const i = this.i;
    const name = `pg_settle.${kind}`;
    const shownTenant = this.tenant(tenant);
    this.prime(i, kind);
    const span = i.tracer.startSpan(name, {
      kind: this.api.SpanKind.INTERNAL,
      ...(shownTenant === undefined ? {} : { attributes: { 'pg_settle.tenant': shownTenant } }),
    });
    const recording = span.isRecording();
    let attempt: number | undefined;
    let effectSeconds: number | undefined;
    const wrap: EffectTimer = (effect) =>
      (async (context: { readonly attempt?: { readonly attempt?: number } }) => {
        attempt = context.attempt?.attempt;
        if (recording && attempt !== undefined) span.setAttribute('pg_settle.attempt', attempt);
        const started = performance.now();
        try {
          return await effect(context as never);
        } finally {
          effectSeconds = (performance.now() - started) / 1000;
        }
      }) as unknown as typeof effect;
    let outcome: O | undefined;
    try {
      // The run span is the active context while the effect runs (the application's own spans nest
      // under it when a context manager is registered) and the parent of every settle call.
      outcome = recording
        ? await this.api.context.with(this.api.trace.setSpan(this.api.context.active(), span), () => execute(wrap))
        : await execute(wrap);
      return outcome;
    } catch (error) {
      // The effect ran but its result could not be stored: run() recorded the attempt unknown.
      if (error instanceof EffectResultError) this.countUnknown(i, kind, 'effect_outcome_unknown');
      if (recording) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: error instanceof Error ? error.name : 'Error' });
      }
      throw error;
    } finally {
      const result = outcome?.outcome ?? 'error';
      const reason = typeof outcome?.reason === 'string' ? outcome.reason : undefined;
      i.outcomes.add(1, this.outcomeAttributes(name, result, reason, shownTenant));
      if (result === 'unknown') this.countUnknown(i, kind, reason ?? 'effect_outcome_unknown');
      if (effectSeconds !== undefined) this.recordEffect(i, name, result, effectSeconds, shownTenant);
      if (recording) {
        span.setAttribute('pg_settle.outcome', result);
        const shown = outcome?.attempt ?? outcome?.settledAttempt ?? attempt;
        if (shown !== undefined) span.setAttribute('pg_settle.attempt', shown);
        if (outcome?.settledBy !== undefined) span.setAttribute('pg_settle.settled_by', outcome.settledBy);
        if (reason !== undefined) span.setAttribute('pg_settle.reason', reason);
        if (outcome?.final !== undefined) span.setAttribute('pg_settle.final', outcome.final);
        if (outcome?.deadLettered !== undefined) span.setAttribute('pg_settle.dead_lettered', outcome.deadLettered);
        if (result === 'unknown')
          span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: 'settlement unknown' });
      }
      span.end();
    }
  }

  runMany<O extends RunOutcomeLike>(
    tenant: string,
    items: number,
    execute: (timed: BatchEffectTimer) => Promise<O[]>,
  ): Promise<O[]> {
    return this.dormant() ? execute(untimed) : this.recordRunMany(tenant, items, execute);
  }

  private async recordRunMany<O extends RunOutcomeLike>(
    tenant: string,
    items: number,
    execute: (timed: BatchEffectTimer) => Promise<O[]>,
  ): Promise<O[]> {
    const i = this.i;
    const name = 'pg_settle.run_many';
    const shownTenant = this.tenant(tenant);
    this.prime(i, 'run_many');
    const span = i.tracer.startSpan(name, {
      kind: this.api.SpanKind.INTERNAL,
      attributes: {
        'pg_settle.batch.size': items,
        ...(shownTenant === undefined ? {} : { 'pg_settle.tenant': shownTenant }),
      },
    });
    const recording = span.isRecording();
    let effectSeconds: number | undefined;
    let ran: readonly number[] = [];
    const wrap: BatchEffectTimer = (effect) =>
      (async (context: { readonly items: readonly { readonly index: number }[] }) => {
        ran = context.items.map((item) => item.index);
        const started = performance.now();
        try {
          return await effect(context as never);
        } finally {
          effectSeconds = (performance.now() - started) / 1000;
        }
      }) as unknown as typeof effect;
    let outcomes: O[] | undefined;
    try {
      outcomes = recording
        ? await this.api.context.with(this.api.trace.setSpan(this.api.context.active(), span), () => execute(wrap))
        : await execute(wrap);
      return outcomes;
    } catch (error) {
      if (recording) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: error instanceof Error ? error.name : 'Error' });
      }
      throw error;
    } finally {
      // One outcome per item (runMany threw: every item counts as error), one effect point per
      // item the effect got (the batch's duration: the items ran together).
      let unknown = 0;
      for (let index = 0; index < items; index += 1) {
        const outcome = outcomes?.[index];
        const result = outcome?.outcome ?? 'error';
        const reason = typeof outcome?.reason === 'string' ? outcome.reason : undefined;
        i.outcomes.add(1, this.outcomeAttributes(name, result, reason, shownTenant));
        if (result === 'unknown') {
          unknown += 1;
          this.countUnknown(i, 'run_many', reason ?? 'effect_outcome_unknown');
        }
      }
      if (effectSeconds !== undefined)
        for (const index of ran)
          this.recordEffect(i, name, outcomes?.[index]?.outcome ?? 'error', effectSeconds, shownTenant);
      if (recording) {
        span.setAttribute('pg_settle.batch.ran', ran.length);
        if (unknown > 0) {
          span.setAttribute('pg_settle.batch.unknown', unknown);
          span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: 'settlement unknown' });
        }
      }
      span.end();
    }
  }

  http(result: HttpRequestResult, details: HttpRequestDetails = {}): void {
    if (this.dormant()) return;
    const i = this.i;
    this.prime(i, 'http');
    const attributes = this.attributes('h', result, undefined, undefined, undefined, () => ({
      'pg_settle.http.result': result,
    }));
    i.httpRequests.add(1, attributes);
    if (details.middlewareSeconds !== undefined) i.httpMiddlewareDuration.record(details.middlewareSeconds, attributes);
    if (details.handler !== undefined)
      this.recordEffect(i, 'pg_settle.http', details.handler.outcome, details.handler.seconds, undefined);
    if (details.unknown !== undefined) this.countUnknown(i, 'http', details.unknown);
  }

  httpErrorAfterResponse(): void {
    if (this.dormant()) return;
    this.i.httpErrorsAfterResponse.add(1);
  }
}

/** What became of the effect, by run()'s outcome: a fenced attempt lost its lease. */
const EFFECT_OUTCOME: Readonly<Record<string, string>> = {
  completed: 'completed',
  failed: 'failed',
  unknown: 'unknown',
  fenced: 'lease_lost',
};

/** The batch calls: their items are counted one by one (pg_settle.batch.items). */
const BATCH_OPERATIONS: ReadonlySet<string> = new Set(['settle.claim_many', 'settle.complete_many']);

/**
 * The client's operation names (camelCase) as the SQL API spells them: claim -> settle.claim,
 * reportUnknown -> settle.report_unknown, claimMany -> settle.claim_many; the retries of a whole
 * runInTransaction() transaction are pg_settle.run_in_transaction.
 */
const sqlNames = new Map<string, string>([['runInTransaction', 'pg_settle.run_in_transaction']]);
export function sqlName(operation: string): string {
  let name = sqlNames.get(operation);
  if (name === undefined) {
    name = `settle.${operation.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`)}`;
    if (sqlNames.size < 1_000) sqlNames.set(operation, name);
  }
  return name;
}

/** [outcome, reason] of a call's rows: the engine's answer (get answers one row too); found / not_found for inspect; ok for other reads. */
function outcomeOf(operation: string, result: unknown): [string, string | undefined] {
  if (!Array.isArray(result)) return ['ok', undefined];
  if (operation === 'settle.inspect') return [result.length === 0 ? 'not_found' : 'found', undefined];
  if (result.length === 1) {
    const row = result[0] as { readonly outcome?: unknown; readonly reason?: unknown } | null;
    if (row !== null && typeof row === 'object' && typeof row.outcome === 'string') {
      return [row.outcome, typeof row.reason === 'string' ? row.reason : undefined];
    }
  }
  return ['ok', undefined];
}

// The HTTP middleware records through the client it was given.
const byClient = new WeakMap<object, ClientTelemetry>();

/** Internal: remembers which telemetry a client records into. */
export function registerClientTelemetry(client: object, telemetry: ClientTelemetry): void {
  byClient.set(client, telemetry);
}

/** Counts a handler that failed after its response was complete, in the metrics of `client`. */
export function recordHttpErrorAfterResponse(client: object): void {
  (byClient.get(client) ?? NOOP_TELEMETRY).httpErrorAfterResponse();
}

/**
 * Starts the pg_settle.unknown_outcomes series of `source` at 0 in the metrics of `client` (the
 * HTTP middleware does when it is created, before its first request).
 */
export function primeUnknownOutcomes(client: object, source: UnknownSource): void {
  (byClient.get(client) ?? NOOP_TELEMETRY).primeUnknowns(source);
}

/**
 * Counts one request answered by the HTTP middleware, in the metrics of `client`: its result, and
 * (`details`) the middleware's own time, the handler's effect and an outcome left unknown.
 */
export function recordHttpRequest(client: object, result: HttpRequestResult, details?: HttpRequestDetails): void {
  (byClient.get(client) ?? NOOP_TELEMETRY).http(result, details);
}
