import { SettleInputError, SettleReadOnlyError } from '../../client/errors.js';
import {
  type EffectOutcome,
  type HttpRequestResult,
  type HttpUnknownReason,
  recordHttpRequest,
} from '../../client/telemetry.js';
import type { AttemptHandle, ClaimInput, ClaimOutcome, Observation } from '../../client/types.js';
import { replayAnswer } from './answers.js';
import { downstreamKeyOf, type IdempotencyContext } from './context.js';
import { defaultFingerprint, type RequestView } from './fingerprint.js';
import { parseIdempotencyKey } from './key.js';
import { keepLease } from './lease.js';
import type { InDoubtKey, ResponseDecision, Resolved } from './options.js';
import { problem } from './problem.js';
import { type CapturedResponse, toStored } from '../../client/stored-response.js';
import {
  answer,
  type FlowResult,
  isAmbiguous,
  MISCONFIGURED,
  notAcquired,
  outcomeUnknown,
  type RunHandler,
  storeError,
  TIMEOUT,
  unavailable,
  withTimeout,
} from './flow-result.js';
import { runInRequestTransaction } from './transaction-flow.js';

// The results and answers transaction-flow.ts shares with this flow live in flow-result.ts (no cycle).
export {
  answer,
  type FlowResult,
  isAmbiguous,
  notAcquired,
  type RunHandler,
  storeError,
  TIMEOUT,
  withTimeout,
} from './flow-result.js';

/** What a request's metrics need to know beyond its answer, noted by the flow as it goes. */
interface FlowNotes {
  /** Lease mode: what became of the handler's effect (transaction mode: runInTransaction records it). */
  handler?: EffectOutcome;
  /** The request's outcome was left unknown, and why. */
  unknown?: HttpUnknownReason;
}

/** The framework-neutral middleware: key, binding, claim, run the handler, settle, answer. */
export async function handleRequest<Req>(
  view: RequestView,
  req: Req,
  o: Resolved<Req>,
  runHandler: RunHandler,
): Promise<FlowResult> {
  const started = performance.now();
  let handlerStarted: number | undefined;
  let handlerEnded: number | undefined;
  const timed: RunHandler = (context) => {
    handlerStarted = performance.now();
    const running = runHandler(context);
    const ended = (): void => {
      handlerEnded = performance.now();
    };
    running.then(ended, ended);
    return running;
  };
  const notes: FlowNotes = {};
  const result = await handleKeyedRequest(view, req, o, timed, notes);
  // Counted in the client's metrics (pg_settle.http.*, docs/observability.md): the middleware's
  // own time is the request's less the handler's (up to its answer, or to the timeout).
  const counted = httpResultOf(result);
  if (counted !== null) {
    const now = performance.now();
    const handlerSeconds = handlerStarted === undefined ? 0 : ((handlerEnded ?? now) - handlerStarted) / 1000;
    recordHttpRequest(o.settle, counted, {
      middlewareSeconds: Math.max(0, (now - started) / 1000 - handlerSeconds),
      ...(notes.handler === undefined ? {} : { handler: { seconds: handlerSeconds, outcome: notes.handler } }),
      ...(notes.unknown === undefined ? {} : { unknown: notes.unknown }),
    });
  }
  return result;
}

/** first (the handler's response), replay (a stored one), or the status of a refusal. */
function httpResultOf(result: FlowResult): HttpRequestResult | null {
  if (result.kind === 'pass') return null;
  if (result.kind === 'captured') return 'first';
  if (MISCONFIGURED.has(result.answer)) return 'misconfigured';
  return result.answer.replayed ? 'replay' : `${result.answer.status}`;
}

async function handleKeyedRequest<Req>(
  view: RequestView,
  req: Req,
  o: Resolved<Req>,
  runHandler: RunHandler,
  notes: FlowNotes,
): Promise<FlowResult> {
  if (!o.methods.has(view.method)) return { kind: 'pass' };
  const parsed = parseIdempotencyKey(view.headers['idempotency-key'], { strict: o.strict, maxLength: o.maxKeyLength });
  if (parsed.kind === 'missing') {
    if (!o.required) return { kind: 'pass' };
    return answer(
      problem(
        'idempotency-key-missing',
        o.problemTypeBase,
        `${view.method} ${view.route} requires an Idempotency-Key header`,
      ),
    );
  }
  if (parsed.kind === 'malformed')
    return answer(problem('idempotency-key-malformed', o.problemTypeBase, parsed.reason));
  if (view.hasBody && view.body === undefined) {
    return answer(
      problem(
        'idempotency-misconfigured',
        o.problemTypeBase,
        'the request has a body but no body parser ran before the middleware: it cannot be fingerprinted',
      ),
    );
  }

  const binding = await o.binding(req);
  const input: ClaimInput = {
    tenant: binding.tenant,
    key: o.keyPrefix + parsed.key,
    request:
      o.fingerprint === undefined
        ? defaultFingerprint(view, o.fingerprintHeaders, o.fingerprintTarget)
        : o.fingerprint(view, req),
    binding: { principal: binding.principal, scopes: binding.scopes ?? [], generation: binding.generation },
    leaseMs: o.leaseMs,
    worker: o.worker,
    maxAttempts: o.maxAttempts,
  };
  try {
    if (o.settlement === 'transaction') return await runInRequestTransaction(input, parsed.key, o, runHandler);
    const beforeRerun = o.beforeRerun;
    const ask = beforeRerun === undefined ? undefined : (key: InDoubtKey) => beforeRerun(key, req);
    return await runUnderLease(input, parsed.key, o, runHandler, ask, notes);
  } catch (error) {
    const report = o.onMisconfiguration;
    // notes.handler is set once the handler ran (settleCaptured, before it rethrows).
    return storeError(error, o, report === undefined ? undefined : (e) => report(e, req), notes.handler !== undefined);
  }
}

const FIRST_WAIT_MS = 25;
const MAX_WAIT_MS = 500;

/** claim(), waiting up to waitForMs while another request holds the key (then its replay). */
async function claimWaiting(input: ClaimInput, o: Resolved<never>): Promise<ClaimOutcome> {
  const deadline = Date.now() + o.waitForMs;
  for (let wait = FIRST_WAIT_MS; ; wait = Math.min(wait * 2, MAX_WAIT_MS)) {
    const claimed = await o.settle.claim(input);
    const remaining = deadline - Date.now();
    if (claimed.outcome !== 'in_progress' || remaining <= 0) return claimed;
    const jittered = wait / 2 + Math.random() * (wait / 2);
    await new Promise((resolve) =>
      setTimeout(resolve, Math.max(1, Math.min(jittered, claimed.retryAfterMs, remaining))),
    );
  }
}

/** report_unknown for this attempt (best effort: a lapsed lease says the same to the next claim). */
async function reportInDoubt(handle: AttemptHandle, o: Resolved<never>): Promise<void> {
  await o.settle.reportUnknown(handle).catch(() => null);
}

/** Lease mode: claim, run the handler under a renewed lease, settle its response. */
async function runUnderLease(
  input: ClaimInput,
  clientKey: string,
  o: Resolved<never>,
  runHandler: RunHandler,
  beforeRerun: ((key: InDoubtKey) => Promise<'run' | 'wait'> | 'run' | 'wait') | undefined,
  notes: FlowNotes,
): Promise<FlowResult> {
  let claimedAt = Date.now();
  // Without rerunAfterUnknown, as the client's run() without reconcile: never a blind re-run
  // after an unknown outcome. The engine answers such a key `in_doubt` (outcome-unknown here)
  // without opening an attempt, whichever instance or process the retry reaches (docs/http.md,
  // "In-doubt requests"); a takeover after a crash (a lapsed lease, nothing reported) still runs.
  let claimed = await claimWaiting({ ...input, rerunAfterUnknown: o.rerunAfterUnknown }, o);
  if (claimed.outcome === 'in_doubt' && beforeRerun !== undefined) {
    // Asked before an attempt is opened: waiting for the downstream spends no attempt.
    const verdict = await beforeRerun({
      tenant: input.tenant,
      key: clientKey,
      operationKey: input.key,
      downstreamKey: downstreamKeyOf(input.tenant, input.key),
      attempt: claimed.attempt,
    });
    if (verdict !== 'run') {
      notes.unknown = 'needs_reconciliation';
      return outcomeUnknown(o, false, true);
    }
    claimedAt = Date.now();
    claimed = await claimWaiting({ ...input, rerunAfterUnknown: true }, o);
  }
  if (claimed.outcome !== 'acquired') {
    if (claimed.outcome === 'unknown' || claimed.outcome === 'in_doubt') notes.unknown = 'needs_reconciliation';
    return notAcquired(claimed, o);
  }
  const handle = claimed.attempt;
  const earlier = {
    count: handle.attempt - 1,
    reportedUnknown: claimed.status === 'unknown',
    mayHaveTakenEffect: handle.attempt > 1,
  };

  const keeper = keepLease(o.settle, handle, o.leaseMs, o.heartbeatIntervalMs, claimedAt);
  let downstreamKey: string | undefined;
  const context: IdempotencyContext = {
    key: clientKey,
    operationKey: handle.key,
    tenant: handle.tenant,
    attempt: handle.attempt,
    earlier,
    // Both made when the handler first reads them (a SHA-256 and an AbortController per request
    // that most handlers never use), with the values they would have had.
    get downstreamKey() {
      return (downstreamKey ??= downstreamKeyOf(handle.tenant, handle.key));
    },
    get signal() {
      return keeper.signal;
    },
    transaction: null,
  };
  const running = runHandler(context);
  const captured = await withTimeout(running, o.handlerTimeoutMs).catch((error: unknown) => ({ error }));
  await keeper.stop();
  if (captured === TIMEOUT || 'error' in captured) {
    // The handler may still be working: its effect is unknown, never a failure. A late response
    // is still offered to complete() (the engine settles it unless another attempt did).
    notes.handler = 'unknown';
    notes.unknown = captured === TIMEOUT ? 'handler_timeout' : 'handler_error';
    await reportInDoubt(handle, o);
    void running.then((late) => settleCaptured(handle, late, o, {})).catch(() => {});
    return answer(
      problem(
        'handler-timeout',
        o.problemTypeBase,
        `the handler did not respond within ${o.handlerTimeoutMs} ms; retry later with the same key`,
        {},
        {
          'retry-after': '1',
        },
      ),
    );
  }
  return settleCaptured(handle, captured, o, notes);
}

/** complete / fail / reportUnknown per the response policy; answers with the canonical response. */
async function settleCaptured(
  handle: AttemptHandle,
  captured: CapturedResponse,
  o: Resolved<never>,
  notes: FlowNotes,
): Promise<FlowResult> {
  const decision = o.responsePolicy(captured.status);
  if (decision === 'unknown') notes.unknown = 'response_policy';
  let observation: Observation;
  try {
    if (decision === 'store') observation = await o.settle.complete(handle, toStored(captured, o.replayHeaders));
    else if (decision === 'unknown') observation = await o.settle.reportUnknown(handle);
    else
      observation = await o.settle.fail(
        handle,
        { httpStatus: captured.status },
        { retryable: decision === 'retryable' },
      );
  } catch (error) {
    // The handler's response exists; whether it was stored is unknown (or it could not be stored).
    if (isAmbiguous(error) || error instanceof SettleInputError) {
      notes.handler = 'unknown';
      notes.unknown ??= 'settle_call_failed';
      await reportInDoubt(handle, o);
      return { kind: 'captured' };
    }
    if (error instanceof SettleReadOnlyError) {
      // Refused, so certainly not stored: the caller never gets a response that was not stored.
      notes.handler = 'unknown';
      notes.unknown ??= 'settle_call_failed';
      await reportInDoubt(handle, o);
      return unavailable(o, 'the response could not be recorded; retry later with the same key');
    }
    // Refused for good (the grant revoked while the handler ran): the response was not stored,
    // the effect may have happened; the caller's answer says so (storeError, executed).
    notes.handler = 'unknown';
    notes.unknown ??= 'settle_call_failed';
    await reportInDoubt(handle, o);
    throw error;
  }
  notes.handler = effectOutcomeOf(decision, observation);
  // Another attempt's response is the canonical one: this one is fenced and never replayed.
  if (
    'status' in observation &&
    observation.status === 'completed' &&
    observation.settledAttempt !== handle.attempt &&
    observation.result !== null
  ) {
    return answer(replayAnswer(observation.result, o));
  }
  return { kind: 'captured' };
}

/** What became of the handler's effect, by the response policy's decision and the engine's answer. */
function effectOutcomeOf(decision: ResponseDecision, observation: Observation): EffectOutcome {
  if (observation.outcome === 'fenced') return 'lease_lost';
  if (observation.outcome === 'conflict') return 'conflict';
  return decision === 'store' ? 'completed' : decision === 'unknown' ? 'unknown' : 'failed';
}
