import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type * as otel from '@opentelemetry/api';
import { type DatabasePool, type QuerySqlToken, sql } from 'slonik';
import { z } from 'zod';
import { mapDatabaseError, notMigratedError, SettleInputError } from './errors.js';
import { validateRow, wasValidated } from './interceptors.js';
import { fromStored, isMiddlewareRequest, storedResponseOf, type HttpResolution } from './stored-response.js';
import { findJsonProblem } from './json.js';
import { INSTRUMENTATION_SCOPE, loadOpenTelemetryApi, type TelemetryOptions } from './telemetry.js';
import type { Json, Queryable, SettleClient, Status } from './types.js';

// Reconciliation: settle.resolve records the verified outcome of an operation that lost
// it, and createReconciler runs the application's downstream lookup over the operations that need
// reconciliation, sharing them between processes through the engine's reconciler leases
// (settle.lease_reconciliation). docs/operations.md "Needs reconciliation" is the runbook.

const status = z.enum(['pending', 'running', 'unknown', 'conflict', 'failed', 'completed']);
const json = z.custom<Json>(() => true);

const resolveRow = z.object({
  outcome: z.enum(['resolved', 'already_final']),
  reason: z.string().nullable(),
  status,
  status_before: status,
  attempt: z.number(),
  settled_attempt: z.number().nullable(),
  result: json.nullable(),
  error: json.nullable(),
});

const leaseRow = z.object({
  tenant: z.string(),
  key: z.string(),
  status,
  attempt: z.number(),
  fingerprint: z.string(),
  request: json,
  principal: z.string(),
  scopes: z.array(z.string()),
  error: json.nullable(),
  dead_letter_reason: z.string().nullable(),
  dead_lettered_at: z.date().nullable(),
  created_at: z.date(),
  lease_token: z.string(),
  lease_expires_at: z.date(),
  checks: z.number(),
});

/** What the reconciler hands the downstream lookup: an operation that needs reconciliation. */
export interface ReconcileCandidate {
  readonly tenant: string;
  readonly key: string;
  readonly status: Extract<Status, 'unknown' | 'conflict'> | Status;
  readonly attempt: number;
  readonly request: Json;
  readonly fingerprint: string;
  readonly principal: string;
  readonly scopes: readonly string[];
  /** The dead letter's error, if any. */
  readonly error: Json | null;
  readonly deadLetteredAt: Date | null;
  readonly createdAt: Date;
  /** How many times a reconciler leased it (1 the first time). */
  readonly checks: number;
}

/** A verified outcome to record with settle.resolve. */
export type ResolveInput = {
  readonly tenant: string;
  readonly key: string;
  /** The reservation's fingerprint (settle.inspect, or the candidate's): a re-claimed key is refused. */
  readonly fingerprint: string;
  /**
   * The attempt the checked evidence concerns: the operation's attempt as read when the downstream
   * was checked (settle.inspect, or the candidate's). A newer attempt (a client retried after the
   * check) is refused with ResolveEvidenceStaleError (SE053): fill it in when you read, never when
   * you apply.
   */
  readonly expectedAttempt: number;
  /** The status read with it (optional): another status is refused too (SE053). */
  readonly expectedStatus?: Status;
  /** Why, and the ticket (1-1024 bytes). */
  readonly reason: string;
  /** What was checked (a bank reference, a statement id). */
  readonly evidence?: Json;
} & ({ readonly outcome: 'completed'; readonly result: Json } | { readonly outcome: 'failed'; readonly error: Json });

/** The answer of resolve(): an operator's or reconciler's decision on an operation that needs reconciliation. */
export type ResolveOutcome =
  | {
      readonly outcome: 'resolved';
      readonly status: Status;
      readonly statusBefore: Status;
      readonly attempt: number;
      readonly settledAttempt: number | null;
      readonly result: Json | null;
      readonly error: Json | null;
    }
  | {
      readonly outcome: 'already_final';
      /** The final outcome is the one asserted (for completed: the same result). */
      readonly matches: boolean;
      readonly status: Status;
      readonly settledAttempt: number | null;
      readonly result: Json | null;
      readonly error: Json | null;
    };

const nonBlank = z.string().refine((s) => s.trim() !== '', 'must not be blank');
const precondition = {
  expectedAttempt: z.number().int().min(1).max(2_147_483_647),
  expectedStatus: status.optional(),
};
const resolveInputSchema = z.union([
  z.object({
    tenant: nonBlank,
    key: nonBlank,
    fingerprint: z.string().regex(/^v\d+:[0-9a-f]{64}$/),
    reason: nonBlank,
    ...precondition,
    evidence: json.optional(),
    outcome: z.literal('completed'),
    result: json,
  }),
  z.object({
    tenant: nonBlank,
    key: nonBlank,
    fingerprint: z.string().regex(/^v\d+:[0-9a-f]{64}$/),
    reason: nonBlank,
    ...precondition,
    evidence: json.optional(),
    outcome: z.literal('failed'),
    error: json,
  }),
]);

/** Checks a resolution before any round trip: SettleInputError (sqlstate null) with the issues. */
export function parseResolveInput(input: unknown): ResolveInput {
  const parsed = resolveInputSchema.safeParse(input);
  if (!parsed.success) {
    throw new SettleInputError(
      `invalid resolution: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'input'} ${i.message}`).join('; ')}`,
      {
        code: 'INVALID_INPUT',
        issues: parsed.error.issues.map((i) => ({ path: i.path, message: i.message })),
      },
    );
  }
  const value = parsed.data as ResolveInput;
  for (const [name, payload] of [
    ['result', 'result' in value ? value.result : undefined],
    ['error', 'error' in value ? value.error : undefined],
    ['evidence', value.evidence],
  ] as const) {
    if (payload === undefined) continue;
    const problem = findJsonProblem(payload);
    if (problem !== null) {
      throw new SettleInputError(`invalid resolution: ${name} ${problem.message}`, {
        code: 'INVALID_INPUT',
        issues: [{ path: [name, ...problem.path], message: problem.message }],
      });
    }
  }
  return value;
}

async function query<S extends z.ZodType>(
  db: Queryable | DatabasePool,
  token: QuerySqlToken<S>,
): Promise<z.output<S>[]> {
  try {
    const { rows } = await db.query(token);
    return rows.map((row): unknown =>
      wasValidated(row) ? row : validateRow(token.parser, row, token.sql),
    ) as z.output<S>[];
  } catch (raw) {
    const mapped = mapDatabaseError(raw);
    throw notMigratedError(mapped) ?? mapped;
  }
}

/**
 * settle.resolve through the client's pool (or `options.connection`): needs a login role with
 * settle_reconciler or settle_admin. Refusals are typed errors (NotReconcilableError SE050,
 * ResolveLeaseHeldError SE051, ResolveFingerprintMismatchError SE052, ResolveEvidenceStaleError SE053:
 * the operation moved on since `expectedAttempt` / `expectedStatus` were read, TenantNotGrantedError, ...).
 */
export async function resolveOperation(
  client: Pick<SettleClient, 'getPool'>,
  input: ResolveInput,
  options: { readonly connection?: Queryable } = {},
): Promise<ResolveOutcome> {
  const r = parseResolveInput(input);
  const db = options.connection ?? (await client.getPool());
  const payload = (value: Json | undefined) => (value === undefined ? null : JSON.stringify(value));
  const [row] = await query(
    db,
    sql.type(resolveRow)`
      select * from settle.resolve(
        tenant => ${r.tenant}, key => ${r.key}, fingerprint => ${r.fingerprint},
        expected_attempt => ${r.expectedAttempt}::integer, expected_status => ${r.expectedStatus ?? null}::settle.status,
        outcome => ${r.outcome}, reason => ${r.reason},
        result => ${payload(r.outcome === 'completed' ? r.result : undefined)}::jsonb,
        error => ${payload(r.outcome === 'failed' ? r.error : undefined)}::jsonb,
        evidence => ${payload(r.evidence)}::jsonb)`,
  );
  if (row === undefined) throw new Error('settle.resolve returned no row');
  return row.outcome === 'resolved'
    ? {
        outcome: 'resolved',
        status: row.status,
        statusBefore: row.status_before,
        attempt: row.attempt,
        settledAttempt: row.settled_attempt,
        result: row.result,
        error: row.error,
      }
    : {
        outcome: 'already_final',
        matches: row.reason === 'matches',
        status: row.status,
        settledAttempt: row.settled_attempt,
        result: row.result,
        error: row.error,
      };
}

export { isMiddlewareRequest, storedResponseOf, type HttpResolution };

/**
 * Why a plain result is refused for a key the HTTP middleware owns (its request is the
 * middleware's request description): every retry would answer 500 idempotency-misconfigured, and a
 * settled result never changes. Null when the result may be recorded.
 */
export function httpResultProblem(request: Json, result: Json): string | null {
  if (!isMiddlewareRequest(request) || fromStored(result) !== null) return null;
  return (
    'this key belongs to the HTTP Idempotency-Key middleware: its result must be the stored response ' +
    'the retry replays (status, headers, body), or every retry answers 500 idempotency-misconfigured for good ' +
    '(a result never changes). Resolve it with an HTTP response instead (pg-settle resolve --http-status N ' +
    "--http-body @file; a reconciler returns { outcome: 'completed', http: { status, body } })."
  );
}

/** What the downstream lookup decided. */
export type ReconcileDecision =
  | { readonly outcome: 'completed'; readonly result: Json; readonly evidence?: Json; readonly reason?: string }
  /** For a key of the HTTP middleware: the response every retry replays (stored in its format). */
  | { readonly outcome: 'completed'; readonly http: HttpResolution; readonly evidence?: Json; readonly reason?: string }
  | { readonly outcome: 'failed'; readonly error: Json; readonly evidence?: Json; readonly reason?: string }
  /** Not decidable (yet): leased again after retryAfterMs (default: the reconciler's). */
  | { readonly outcome: 'undecided'; readonly retryAfterMs?: number };

/** Options of createReconciler(): the client, how to check an operation downstream, batch size and pacing. */
export interface ReconcilerOptions {
  /** A client connected as a login role with settle_reconciler (or settle_admin). */
  readonly client: Pick<SettleClient, 'getPool'>;
  /**
   * The downstream lookup (e.g. the charge by its idempotency key). Return undefined or
   * `{ outcome: 'undecided' }` to leave it; throwing, or not answering within checkTimeoutMs,
   * leaves it too. `signal` aborts when the check times out or the reconciler stops.
   */
  readonly check: (
    operation: ReconcileCandidate,
    context: { readonly signal: AbortSignal },
  ) => Promise<ReconcileDecision | undefined | null>;
  /** Names this process in leases and in the resolution's reason (default host:pid). */
  readonly holder?: string;
  /** Operations leased per sweep (default 10). */
  readonly batchSize?: number;
  /** The reconciler lease (default 60 s): no other process checks the operation meanwhile. */
  readonly leaseMs?: number;
  /** How long one check may take before it counts as undecided (default 10 s). */
  readonly checkTimeoutMs?: number;
  /** When an undecided operation may be leased again (default 60 s). */
  readonly retryAfterMs?: number;
  /** Pause between sweeps of start() when a sweep found nothing (default 30 s). */
  readonly idleMs?: number;
  /** Prefix of the resolution's reason (default `reconciler <holder>`). */
  readonly reason?: string;
  /** Metrics and spans (as createSettleClient's `telemetry`); false: none. */
  readonly telemetry?: TelemetryOptions | false;
  /** Called with errors a sweep could not handle (a refused resolution, the database down). */
  readonly onError?: (error: unknown, operation?: ReconcileCandidate) => void;
}

/** What a sweep did with one leased operation. */
export type ReconcileResult =
  | 'resolved_completed'
  | 'resolved_failed'
  | 'already_final'
  | 'undecided'
  | 'check_timeout'
  | 'check_error'
  | 'refused';

/** What one sweep() leased and what it did with each operation. */
export interface SweepSummary {
  readonly leased: number;
  readonly results: Readonly<Record<ReconcileResult, number>>;
  readonly operations: readonly { readonly tenant: string; readonly key: string; readonly result: ReconcileResult }[];
}

/** A background reconciler of operations that need reconciliation: sweep() once, or start() and stop(). */
export interface Reconciler {
  /** Leases one batch, checks and resolves it; resolves once the batch is handled. */
  sweep(): Promise<SweepSummary>;
  /** Sweeps until stop(): again at once after a full batch, else after idleMs. */
  start(): void;
  /** Stops the loop (and aborts running checks); resolves when the current sweep ended. */
  stop(): Promise<void>;
}

/** Metric names of the reconciler (OpenTelemetry form; docs/observability.md). */
export const RECONCILER_METRICS = {
  operations: 'pg_settle.reconciler.operations',
  checkDuration: 'pg_settle.reconciler.check.duration',
} as const;

class TimeoutSignal extends Error {}

/** Creates a reconciler that leases operations needing reconciliation, asks `check` downstream what happened, and resolves them (docs/client.md). */
export function createReconciler(options: ReconcilerOptions): Reconciler {
  const holder = options.holder ?? `${hostname()}:${process.pid}`;
  const batchSize = options.batchSize ?? 10;
  const leaseMs = options.leaseMs ?? 60_000;
  const checkTimeoutMs = options.checkTimeoutMs ?? 10_000;
  const retryAfterMs = options.retryAfterMs ?? 60_000;
  const idleMs = options.idleMs ?? 30_000;
  const reasonPrefix = options.reason ?? `reconciler ${holder}`;
  const onError = options.onError ?? (() => {});
  const stopping = new AbortController();
  const telemetry = reconcilerTelemetry(options.telemetry);

  const lease = async (pool: DatabasePool) =>
    query(
      pool,
      sql.type(leaseRow)`
        select * from settle.lease_reconciliation(holder => ${holder},
          lease => make_interval(secs => ${leaseMs}::float8 / 1000), batch_size => ${batchSize}::integer)`,
    );

  const release = async (pool: DatabasePool, row: z.output<typeof leaseRow>, afterMs: number) =>
    query(
      pool,
      sql.type(z.object({ released: z.boolean() }))`
        select settle.release_reconciliation(tenant => ${row.tenant}, key => ${row.key},
          lease_token => ${row.lease_token}::uuid, retry_after => make_interval(secs => ${afterMs}::float8 / 1000)) as released`,
    );

  async function decide(
    candidate: ReconcileCandidate,
  ): Promise<{ decision: ReconcileDecision | null; result?: ReconcileResult }> {
    const controller = new AbortController();
    const abort = () => controller.abort();
    stopping.signal.addEventListener('abort', abort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    const started = performance.now();
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          controller.abort(new TimeoutSignal('check timed out'));
          reject(new TimeoutSignal('check timed out'));
        }, checkTimeoutMs);
      });
      const answer = await Promise.race([options.check(candidate, { signal: controller.signal }), timeout]);
      telemetry.checkDuration((performance.now() - started) / 1000, 'answered');
      return { decision: answer ?? null };
    } catch (error) {
      const timedOut = error instanceof TimeoutSignal;
      telemetry.checkDuration((performance.now() - started) / 1000, timedOut ? 'timeout' : 'error');
      if (!timedOut) onError(error, candidate);
      return { decision: null, result: timedOut ? 'check_timeout' : 'check_error' };
    } finally {
      clearTimeout(timer);
      stopping.signal.removeEventListener('abort', abort);
    }
  }

  async function reconcileOne(pool: DatabasePool, row: z.output<typeof leaseRow>): Promise<ReconcileResult> {
    const candidate: ReconcileCandidate = {
      tenant: row.tenant,
      key: row.key,
      status: row.status,
      attempt: row.attempt,
      request: row.request,
      fingerprint: row.fingerprint,
      principal: row.principal,
      scopes: row.scopes,
      error: row.error,
      deadLetteredAt: row.dead_lettered_at,
      createdAt: row.created_at,
      checks: row.checks,
    };
    const { decision, result } = await decide(candidate);
    if (decision === null || decision.outcome === 'undecided') {
      const after = decision?.outcome === 'undecided' ? (decision.retryAfterMs ?? retryAfterMs) : retryAfterMs;
      await release(pool, row, after);
      return result ?? 'undecided';
    }
    const evidence = {
      ...(isObject(decision.evidence)
        ? decision.evidence
        : decision.evidence === undefined
          ? {}
          : { value: decision.evidence }),
      checked_by: holder,
      checks: row.checks,
    };
    // The precondition is what this check was made against: the attempt and status leased with
    // it. A client that retried since opened a newer attempt, which the lookup did not see.
    const base = {
      tenant: row.tenant,
      key: row.key,
      fingerprint: row.fingerprint,
      evidence,
      expectedAttempt: row.attempt,
      expectedStatus: row.status,
      reason:
        decision.reason === undefined ? `${reasonPrefix}: downstream lookup` : `${reasonPrefix}: ${decision.reason}`,
    };
    try {
      let input: ResolveInput;
      if (decision.outcome === 'completed') {
        const result = 'http' in decision ? storedResponseOf(decision.http) : decision.result;
        const problem = httpResultProblem(row.request, result);
        if (problem !== null)
          throw new SettleInputError(`invalid resolution of ${row.tenant} / ${row.key}: ${problem}`, {
            code: 'INVALID_INPUT',
          });
        input = { ...base, outcome: 'completed', result };
      } else {
        input = { ...base, outcome: 'failed', error: decision.error };
      }
      const answer = await resolveOperation({ getPool: async () => pool }, input);
      if (answer.outcome === 'already_final') return 'already_final';
      return decision.outcome === 'completed' ? 'resolved_completed' : 'resolved_failed';
    } catch (error) {
      onError(error, candidate);
      await release(pool, row, retryAfterMs).catch(() => {});
      return 'refused';
    }
  }

  async function sweep(): Promise<SweepSummary> {
    return telemetry.span('pg-settle reconcile sweep', async (span) => {
      const pool = await options.client.getPool();
      const rows = await lease(pool);
      const results: Record<ReconcileResult, number> = {
        resolved_completed: 0,
        resolved_failed: 0,
        already_final: 0,
        undecided: 0,
        check_timeout: 0,
        check_error: 0,
        refused: 0,
      };
      const operations: { tenant: string; key: string; result: ReconcileResult }[] = [];
      for (const row of rows) {
        if (stopping.signal.aborted) {
          await release(pool, row, 0).catch(() => {});
          continue;
        }
        const result = await telemetry.span('pg-settle reconcile', async (child) => {
          const r = await reconcileOne(pool, row);
          child?.setAttribute('pg_settle.reconcile.result', r);
          return r;
        });
        telemetry.count(result);
        results[result] += 1;
        operations.push({ tenant: row.tenant, key: row.key, result });
      }
      span?.setAttribute('pg_settle.reconcile.leased', rows.length);
      return { leased: rows.length, results, operations };
    });
  }

  let loop: Promise<void> | undefined;
  return {
    sweep,
    start() {
      if (loop !== undefined) return;
      loop = (async () => {
        while (!stopping.signal.aborted) {
          let full = false;
          try {
            full = (await sweep()).leased >= batchSize;
          } catch (error) {
            onError(error);
          }
          // stop() aborts the wait; the loop then ends.
          if (!full) await sleep(idleMs, undefined, { signal: stopping.signal }).catch(() => {});
        }
      })();
    },
    async stop() {
      stopping.abort();
      await loop;
    },
  };
}

function isObject(value: unknown): value is Record<string, Json> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

interface ReconcilerTelemetry {
  span<R>(name: string, fn: (span: otel.Span | undefined) => Promise<R>): Promise<R>;
  count(result: ReconcileResult): void;
  checkDuration(seconds: number, answer: 'answered' | 'timeout' | 'error'): void;
}

function reconcilerTelemetry(options: TelemetryOptions | false | undefined): ReconcilerTelemetry {
  const api = options === false ? null : loadOpenTelemetryApi();
  if (api === null) {
    return { span: (_name, fn) => fn(undefined), count: () => {}, checkDuration: () => {} };
  }
  let instruments: { operations: otel.Counter; check: otel.Histogram; tracer: otel.Tracer } | undefined;
  const i = () =>
    (instruments ??= (() => {
      const meterProvider =
        ((options || {}).meterProvider as otel.MeterProvider | undefined) ?? api.metrics.getMeterProvider();
      const tracerProvider =
        ((options || {}).tracerProvider as otel.TracerProvider | undefined) ?? api.trace.getTracerProvider();
      const meter = meterProvider.getMeter(INSTRUMENTATION_SCOPE);
      return {
        operations: meter.createCounter(RECONCILER_METRICS.operations, {
          description:
            'Operations the reconciler handled, by result (resolved_completed, resolved_failed, already_final, undecided, check_timeout, check_error, refused).',
          unit: '{operation}',
        }),
        check: meter.createHistogram(RECONCILER_METRICS.checkDuration, {
          description: 'Duration of the downstream lookup, by answer (answered, timeout, error).',
          unit: 's',
          advice: { explicitBucketBoundaries: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60] },
        }),
        tracer: tracerProvider.getTracer(INSTRUMENTATION_SCOPE),
      };
    })());
  return {
    span: (name, fn) =>
      i().tracer.startActiveSpan(name, async (span) => {
        try {
          return await fn(span);
        } catch (error) {
          span.recordException(error as Error);
          span.setStatus({ code: api.SpanStatusCode.ERROR });
          throw error;
        } finally {
          span.end();
        }
      }),
    count: (result) => i().operations.add(1, { 'pg_settle.reconcile.result': result }),
    checkDuration: (seconds, answer) => i().check.record(seconds, { 'pg_settle.reconcile.check': answer }),
  };
}
