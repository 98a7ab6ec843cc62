import type { SettleClient } from '../../client/client.js';
import type { Isolation } from '../../client/transaction.js';
import type { Json } from '../../client/types.js';
import type { FingerprintTarget, RequestView } from './fingerprint.js';
import { DEFAULT_PROBLEM_TYPE_BASE } from './problem.js';
import { DEFAULT_REPLAY_HEADERS } from '../../client/stored-response.js';
import { primeUnknownOutcomes } from '../../client/telemetry.js';

/** Who is asking: the key is reserved for this caller (see docs/http.md, "Bound keys"). */
export interface IdempotencyBinding {
  /** The keyspace: an account, an organisation. The same key in another tenant is another operation. */
  readonly tenant: string;
  /** The authenticated caller (user, API client). */
  readonly principal: string;
  /** The authorization the request was made with (order and duplicates do not matter). */
  readonly scopes?: readonly string[];
  /** Token epoch, session version: bump it when the caller re-authenticates with other rights. */
  readonly generation: number | bigint;
}

/**
 * What a response becomes: `store` (the outcome, replayed to every retry), `retryable` (not
 * stored; a retry runs the handler again), `final` (not stored; the key fails for good), or
 * `unknown` (not stored; the effect may have happened; a retry runs the handler again).
 */
export type ResponseDecision = 'store' | 'retryable' | 'final' | 'unknown';

/** Stripe's rule: 2xx and 4xx are the outcome; 504 means the effect's fate is unknown; other 5xx are retryable. */
export function defaultResponsePolicy(status: number): ResponseDecision {
  if (status < 500) return 'store';
  return status === 504 ? 'unknown' : 'retryable';
}

/** What `beforeRerun` is told about a key whose earlier attempt reported unknown. */
export interface InDoubtKey {
  readonly tenant: string;
  /** The Idempotency-Key as sent. */
  readonly key: string;
  /** The key the engine stores (keyPrefix + key): what the feed, the reconciler and the CLI show. */
  readonly operationKey: string;
  /** The same downstreamKey the handler got: look the effect up by it. */
  readonly downstreamKey: string;
  /** The attempt that reported unknown. */
  readonly attempt: number;
}

/** Options that may differ per route. */
export interface RouteOptions<Req> {
  /**
   * Stored before the client's key (default none): the engine key is `keyPrefix + key`, so the
   * middleware's keys never meet the keys of your own run() calls in the tenant's key space, and
   * a feed consumer or reconciler tells them apart (`byKeyPrefix`). 1-64 characters, no spaces;
   * the client's key may then be at most 255 minus its length. Fixed per route for good: a
   * changed prefix makes every stored key another key.
   */
  readonly keyPrefix?: string;
  /** Methods the middleware acts on (default POST and PATCH); others pass through untouched. */
  readonly methods?: readonly string[];
  /** Answer 400 when the key is missing (default true); false lets keyless requests through. */
  readonly required?: boolean;
  /** Accept only the draft's sf-string form (default false: a bare token is accepted too). */
  readonly strict?: boolean;
  /** Longest accepted key (default and maximum 255). */
  readonly maxKeyLength?: number;
  /** Request headers that are part of the fingerprint (default none). */
  readonly fingerprintHeaders?: readonly string[];
  /**
   * Which part of the request target the fingerprint covers (default `url`: the concrete path and
   * the query string as sent, so a key reused against another resource is refused with 422).
   * `path` drops the query string; `route` keeps only the route pattern (`/accounts/:id/payouts`):
   * the same key and body then replay one account's response to a request for another account.
   * Narrow it only when the path or query carries nothing that selects the resource.
   */
  readonly fingerprintTarget?: FingerprintTarget;
  /** Replace the request description that is fingerprinted (default: method, target, body digest, headers). */
  readonly fingerprint?: (view: RequestView, req: Req) => Json;
  /** Response headers replayed besides content-type, location and etag (set-cookie never is). */
  readonly replayHeaders?: readonly string[];
  /** Header marking a replay (default `Idempotent-Replayed`, value `true`); null: none. */
  readonly replayedHeader?: string | null;
  /** Largest response body that is stored (default 256 KiB, at most 700 KiB). */
  readonly maxBodyBytes?: number;
  /** Claim lease (default 30 000 ms, 1 000-86 400 000), renewed every heartbeatIntervalMs. */
  readonly leaseMs?: number;
  /** Default leaseMs / 3. */
  readonly heartbeatIntervalMs?: number;
  /** Attempts before the key is dead-lettered (default 5; fixed at the first request). */
  readonly maxAttempts?: number;
  /** Wait this long for an in-flight request with the same key and replay it (default 0: answer 409). */
  readonly waitForMs?: number;
  /**
   * After an earlier attempt of the key reported unknown (a 504, a handler timeout), run the
   * handler again (default false, like the client's run(): the request is answered 500
   * `outcome-unknown` and nothing runs). Turn it on for handlers that pass `downstreamKey` to an
   * API that honours it, or that look their effect up first (`context.earlier`).
   */
  readonly rerunAfterUnknown?: boolean;
  /**
   * Asked on a retry of a key whose earlier attempt reported unknown, before any attempt is
   * opened (instead of `rerunAfterUnknown`): `'run'` runs the handler again as the next attempt;
   * `'wait'` answers 500 `outcome-unknown` with Retry-After and opens no attempt, so waiting
   * for the downstream (or the reconciler) never spends the attempt budget. Look the effect up
   * by `downstreamKey`.
   */
  readonly beforeRerun?: (key: InDoubtKey, req: Req) => Promise<'run' | 'wait'> | 'run' | 'wait';
  /** Give the handler this long to respond (default 60 000 ms); then 503 and outcome unknown. */
  readonly handlerTimeoutMs?: number;
  /** What a response becomes (default: defaultResponsePolicy). */
  readonly responsePolicy?: (status: number) => ResponseDecision;
  /** `lease` (default) or `transaction`: the handler gets a transaction that commits with the stored response. */
  readonly settlement?: 'lease' | 'transaction';
  /** Isolation level of the request's transaction (settlement: 'transaction'). */
  readonly isolation?: Isolation;
  /** Prefix of the problem `type` URIs (default `urn:pg-settle:problem:`). */
  readonly problemTypeBase?: string;
  /**
   * Called when the handler fails (throws, rejects, or an error handler tries to answer) after its
   * response was complete: that response is the one sent and stored; this is never sent. Default:
   * logged (Express: console.error; Fastify: request.log.error). Counted either way
   * (`pg_settle.http.errors_after_response`).
   */
  readonly onErrorAfterResponse?: (error: unknown, req: Req) => void;
  /**
   * Called when the deployment is set up wrong (the login is not granted the binding's tenant,
   * lacks settle_app, the database is not migrated, the engine refused the key the middleware
   * built): the error names the cause and how to fix it. The caller gets a plain 500
   * `idempotency-misconfigured` that discloses none of it. Default: console.error. Counted either
   * way (`pg_settle.http.requests`, result `misconfigured`).
   */
  readonly onMisconfiguration?: (error: Error, req: Req) => void;
}

export interface IdempotencyOptions<Req> extends RouteOptions<Req> {
  /** A pg-settle client connected with a role that has settle_app. */
  readonly settle: SettleClient;
  /**
   * Resolves the caller from your auth. WITHOUT IT every caller shares one keyspace: a second
   * caller that sends someone else's key with the same request gets that caller's response.
   */
  readonly binding?: (req: Req) => IdempotencyBinding | Promise<IdempotencyBinding>;
  /** Worker name kept with each attempt (default `http:<pid>`). */
  readonly worker?: string;
}

export const MAX_BODY_BYTES_LIMIT = 700 * 1024;

export interface Resolved<Req> {
  readonly settle: SettleClient;
  readonly binding: (req: Req) => IdempotencyBinding | Promise<IdempotencyBinding>;
  readonly worker: string;
  readonly methods: ReadonlySet<string>;
  readonly required: boolean;
  readonly strict: boolean;
  readonly maxKeyLength: number;
  readonly fingerprintHeaders: readonly string[];
  readonly fingerprintTarget: FingerprintTarget;
  readonly fingerprint: ((view: RequestView, req: Req) => Json) | undefined;
  readonly replayHeaders: ReadonlySet<string>;
  readonly replayedHeader: string | null;
  readonly maxBodyBytes: number;
  readonly leaseMs: number;
  readonly heartbeatIntervalMs: number;
  readonly maxAttempts: number;
  readonly waitForMs: number;
  readonly handlerTimeoutMs: number;
  readonly rerunAfterUnknown: boolean;
  readonly beforeRerun: ((key: InDoubtKey, req: Req) => Promise<'run' | 'wait'> | 'run' | 'wait') | undefined;
  readonly keyPrefix: string;
  readonly responsePolicy: (status: number) => ResponseDecision;
  readonly settlement: 'lease' | 'transaction';
  readonly isolation: Isolation | undefined;
  readonly problemTypeBase: string;
  readonly onErrorAfterResponse: ((error: unknown, req: Req) => void) | undefined;
  readonly onMisconfiguration: ((error: Error, req: Req) => void) | undefined;
}

/** The binding used without a resolver: one shared keyspace (documented loudly in docs/http.md). */
export const UNBOUND: IdempotencyBinding = { tenant: 'default', principal: 'anonymous', scopes: [], generation: 0 };

let warnedUnbound = false;

export function resolveOptions<Req>(options: IdempotencyOptions<Req>, route: RouteOptions<Req> = {}): Resolved<Req> {
  const o = { ...options, ...route };
  if (options.binding === undefined && !warnedUnbound) {
    warnedUnbound = true;
    process.emitWarning(
      'pg-settle idempotency middleware without a binding resolver: every caller shares one keyspace, ' +
        'so a caller who learns another caller\'s key and request gets that caller\'s response. See docs/http.md, "Bound keys".',
      { code: 'PG_SETTLE_UNBOUND_KEYS' },
    );
  }
  const leaseMs = o.leaseMs ?? 30_000;
  const keyPrefix = o.keyPrefix ?? '';
  if (o.keyPrefix !== undefined && !(typeof keyPrefix === 'string' && /^[!-~]{1,64}$/.test(keyPrefix))) {
    throw new RangeError('keyPrefix must be 1-64 visible ASCII characters (no spaces)');
  }
  if (o.beforeRerun !== undefined && o.rerunAfterUnknown === true) {
    throw new RangeError(
      'beforeRerun and rerunAfterUnknown: true exclude each other (beforeRerun decides each re-run)',
    );
  }
  const maxBodyBytes = o.maxBodyBytes ?? 256 * 1024;
  if (!(Number.isInteger(maxBodyBytes) && maxBodyBytes >= 0 && maxBodyBytes <= MAX_BODY_BYTES_LIMIT)) {
    throw new RangeError(
      `maxBodyBytes must be an integer 0-${MAX_BODY_BYTES_LIMIT} (stored results are at most 1 MiB as base64 JSON)`,
    );
  }
  // The unknown outcomes of HTTP requests count from 0 before the first request: Prometheus' rate()
  // needs a sample before an increment (docs/observability.md, pg_settle.unknown_outcomes).
  primeUnknownOutcomes(options.settle, 'http');
  return {
    settle: options.settle,
    binding: options.binding ?? (() => UNBOUND),
    worker: options.worker ?? `http:${process.pid}`,
    methods: new Set((o.methods ?? ['POST', 'PATCH']).map((m) => m.toUpperCase())),
    required: o.required ?? true,
    strict: o.strict ?? false,
    maxKeyLength: Math.min(o.maxKeyLength ?? 255, 255 - keyPrefix.length),
    fingerprintHeaders: o.fingerprintHeaders ?? [],
    fingerprintTarget: fingerprintTargetOf(o.fingerprintTarget),
    fingerprint: o.fingerprint,
    replayHeaders: new Set([...DEFAULT_REPLAY_HEADERS, ...(o.replayHeaders ?? []).map((h) => h.toLowerCase())]),
    replayedHeader: o.replayedHeader === undefined ? 'Idempotent-Replayed' : o.replayedHeader,
    maxBodyBytes,
    leaseMs,
    heartbeatIntervalMs: o.heartbeatIntervalMs ?? Math.max(1, Math.floor(leaseMs / 3)),
    maxAttempts: o.maxAttempts ?? 5,
    waitForMs: o.waitForMs ?? 0,
    handlerTimeoutMs: o.handlerTimeoutMs ?? 60_000,
    rerunAfterUnknown: o.rerunAfterUnknown ?? false,
    beforeRerun: o.beforeRerun,
    keyPrefix,
    responsePolicy: o.responsePolicy ?? defaultResponsePolicy,
    settlement: o.settlement ?? 'lease',
    isolation: o.isolation,
    problemTypeBase: o.problemTypeBase ?? DEFAULT_PROBLEM_TYPE_BASE,
    onErrorAfterResponse: o.onErrorAfterResponse,
    onMisconfiguration: o.onMisconfiguration,
  };
}

const FINGERPRINT_TARGETS: readonly FingerprintTarget[] = ['url', 'path', 'route'];

function fingerprintTargetOf(value: FingerprintTarget | undefined): FingerprintTarget {
  if (value === undefined) return 'url';
  if (!FINGERPRINT_TARGETS.includes(value))
    throw new RangeError(`fingerprintTarget must be one of ${FINGERPRINT_TARGETS.join(', ')}`);
  return value;
}
