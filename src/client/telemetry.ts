import { createRequire } from 'node:module';
import type * as otel from '@opentelemetry/api';
import { SettleError } from './errors.js';
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

/** The hooks the client calls. */
export interface ClientTelemetry {
  /** Wraps one settle call (all its transparent retries): duration, outcome, span. */
  call<R>(operation: string, tenant: string | undefined, execute: () => Promise<R>): Promise<R>;
  /** One transparent retry (from the retry policy's onRetry). */
  retry(event: RetryEventLike): void;
  /** Wraps run()/runInTransaction(): `execute` gets `wrap`, which times the effect. */
  run<O extends RunOutcomeLike>(kind: RunKind, tenant: string, execute: (timed: EffectTimer) => Promise<O>): Promise<O>;
  /** One request answered by the HTTP middleware. */
  http(result: HttpRequestResult): void;
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
  http: () => {},
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
  httpRequests: 'pg_settle.http.requests',
  httpErrorsAfterResponse: 'pg_settle.http.errors_after_response',
  feedEvents: 'pg_settle.feed.events',
  feedLag: 'pg_settle.feed.lag',
} as const;

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
  readonly httpRequests: otel.Counter;
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
        "Duration of run()'s effect, by what became of it (completed, failed, unknown, lease_lost, ...).",
        EFFECT_BUCKETS,
      ),
      httpRequests: meter.createCounter(METRICS.httpRequests, {
        description: 'Requests answered by the idempotency middleware, by result (first, replay, 400, 409, 422).',
        unit: '{request}',
      }),
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
      if (recording) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: this.api.SpanStatusCode.ERROR, message: error instanceof Error ? error.name : 'Error' });
      }
      throw error;
    } finally {
      const result = outcome?.outcome ?? 'error';
      const reason = typeof outcome?.reason === 'string' ? outcome.reason : undefined;
      i.outcomes.add(1, this.outcomeAttributes(name, result, reason, shownTenant));
      if (effectSeconds !== undefined) {
        const effectOutcome = EFFECT_OUTCOME[result] ?? result;
        i.effectDuration.record(
          effectSeconds,
          this.attributes('e', kind, effectOutcome, shownTenant, undefined, () => ({
            'pg_settle.operation': name,
            'pg_settle.outcome': effectOutcome,
            ...(shownTenant === undefined ? {} : { 'pg_settle.tenant': shownTenant }),
          })),
        );
      }
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

  http(result: HttpRequestResult): void {
    if (this.dormant()) return;
    this.i.httpRequests.add(
      1,
      this.attributes('h', result, undefined, undefined, undefined, () => ({ 'pg_settle.http.result': result })),
    );
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

/** The client's operation names (camelCase) as the SQL API spells them: claim -> settle.claim. */
const SQL_NAMES: Readonly<Record<string, string>> = {
  reportUnknown: 'settle.report_unknown',
  expireLeases: 'settle.expire_leases',
  deadLetters: 'settle.dead_letters',
  auditLog: 'settle.audit_log',
  runInTransaction: 'pg_settle.run_in_transaction',
};
const sqlName = (operation: string): string => SQL_NAMES[operation] ?? `settle.${operation}`;

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

/** Counts one request answered by the HTTP middleware, in the metrics of `client`. */
export function recordHttpRequest(client: object, result: HttpRequestResult): void {
  (byClient.get(client) ?? NOOP_TELEMETRY).http(result);
}
