import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { defaultClassify } from './classify.js';
import {
  EffectResultError,
  LeaseLostError,
  mapDatabaseError,
  ReconciliationRequiredError,
  SettleCommitUnconfirmedError,
  SettleConnectionError,
  SettleError,
  SettleInputError,
  SettleTimeoutError,
  StoredResultMismatchError,
} from './errors.js';
import { findJsonProblem } from './json.js';
import { LazyAbortController } from './lazy-abort.js';
import type {
  AttemptHandle,
  CallOptions,
  CanonicalState,
  EarlierAttempts,
  HeartbeatFenceReason,
  HeartbeatOutcome,
  Json,
  LockedRead,
  Observation,
  OperationRef,
  ResultSchema,
  RunContext,
  RunInput,
  RunOptions,
  RunOutcome,
  SettleClient,
  UnknownReason,
} from './types.js';

export type { Classification } from './classify.js';

/** The worker name of run()'s attempts when the input names none: this process. */
export const DEFAULT_WORKER = `run:${hostname()}:${process.pid}`;
export type {
  EarlierAttempts,
  ResultSchema,
  RunContext,
  RunInput,
  RunOptions,
  RunOutcome,
  UnknownReason,
  VoidToNull,
} from './types.js';

const NEEDS_RECONCILIATION_HINT =
  'Pass run(input, effect, { reconcile }) to look the effect up downstream, or { rerunAfterUnknown: true } if the downstream honours one idempotency key for every attempt.';

const FIRST_WAIT_MS = 5;
const DEFAULT_POLL_MS = 50;

/** { name, message, code? }: the class name, the message, and the SQLSTATE or error code if any. */
export function defaultErrorToJson(error: unknown): Json {
  if (!(error instanceof Error)) return { message: String(error) };
  const mapped = mapDatabaseError(error);
  const code = mapped instanceof SettleError ? mapped.code : (error as { code?: unknown }).code;
  const name = error.name === 'Error' ? error.constructor.name : error.name;
  return { name, message: error.message, ...(typeof code === 'string' ? { code } : {}) };
}

export const isAmbiguous = (error: unknown): error is Error =>
  error instanceof SettleConnectionError ||
  error instanceof SettleTimeoutError ||
  error instanceof SettleCommitUnconfirmedError;

const callOptions = (options: CallOptions | undefined): CallOptions =>
  options?.connection === undefined ? {} : { connection: options.connection };

const asError = (value: unknown): Error =>
  value instanceof Error ? value : new Error(String(value), { cause: value });

/** run()'s answer to a claim that did not acquire and will not be retried (every outcome but acquired and in_progress). */
export function notAcquiredOutcome(
  claimed: Exclude<Awaited<ReturnType<SettleClient['claim']>>, { outcome: 'acquired' | 'in_progress' }>,
  input: OperationRef,
): RunOutcome<never> {
  switch (claimed.outcome) {
    case 'replay':
      return { outcome: 'replay', result: claimed.result as never, settledAttempt: claimed.settledAttempt };
    case 'conflict':
      return { outcome: 'conflict', conflictOn: claimed.conflictOn };
    case 'refused':
      return { outcome: 'refused', reason: claimed.reason };
    case 'failed':
      return {
        outcome: 'failed',
        error: claimed.error,
        final: true,
        deadLettered: claimed.deadLettered,
        attempt: claimed.attempt,
      };
    case 'unknown':
    case 'in_doubt':
      // Timeout means unknown: the budget is spent and an attempt may have taken effect (or,
      // in_doubt, an attempt reported unknown and this claim asked not to run it again).
      return {
        outcome: 'unknown',
        attempt: claimed.attempt,
        record: null,
        reason: 'needs_reconciliation',
        cause:
          claimed.outcome === 'unknown'
            ? new Error(
                'the attempt budget is spent and an attempt may have taken effect: dead-lettered, needs reconciliation',
              )
            : new ReconciliationRequiredError(
                `attempt ${claimed.attempt} of ${input.tenant}/${input.key} reported unknown: its effect may have happened, and this call asked not to run it again without reconciling; the effect did not run and no attempt was opened`,
                { code: 'NEEDS_RECONCILIATION', hint: NEEDS_RECONCILIATION_HINT },
              ),
      };
  }
}

/**
 * Claims until acquired, settled, conflicting, or waitForMs spent on someone else's lease;
 * `onAcquired` runs the attempt. Shared by run() and runInTransaction(). While another worker
 * holds the lease it claims again after 5, 10, 20, 40, then every pollIntervalMs (default 50)
 * ms, jittered: a completion is seen within about pollIntervalMs of its commit. Polling, not
 * LISTEN/NOTIFY: it needs no dedicated connection and works where NOTIFY does not reach the
 * waiter (a Citus worker, a pooler in transaction mode).
 */
export async function claimLoop<R>(
  input: RunInput,
  claim: () => Promise<
    | { readonly outcome: 'acquired'; readonly value: R }
    | Exclude<Awaited<ReturnType<SettleClient['claim']>>, { outcome: 'acquired' }>
  >,
  signal?: AbortSignal,
): Promise<R | RunOutcome<never>> {
  const deadline = Date.now() + (input.waitForMs ?? 5_000);
  const cap = Math.min(5_000, Math.max(1, input.pollIntervalMs ?? DEFAULT_POLL_MS));
  for (let wait = Math.min(FIRST_WAIT_MS, cap); ; wait = Math.min(wait * 2, cap)) {
    signal?.throwIfAborted();
    const claimed = await claim();
    if (claimed.outcome === 'acquired') return claimed.value;
    if (claimed.outcome !== 'in_progress') return notAcquiredOutcome(claimed, input);
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      const { attempt, leaseExpiresAt, retryAfterMs } = claimed;
      return { outcome: 'in_progress', attempt, leaseExpiresAt, retryAfterMs };
    }
    const jittered = wait / 2 + Math.random() * (wait / 2);
    const ms = Math.max(1, Math.min(jittered, claimed.retryAfterMs, remaining));
    // An abort (the only way this sleep rejects) ends the wait; the loop's throwIfAborted() then
    // rejects with the caller's reason, not Node's AbortError.
    await sleep(ms, undefined, { signal }).catch(() => {});
  }
}

/** Validates `value` with the run's result schema (if any); throws `onIssue(message)` when it does not pass. */
export function checkSchema<T>(
  schema: ResultSchema<T> | undefined,
  value: unknown,
  onIssue: (message: string) => Error,
): T {
  if (schema === undefined) return value as T;
  const verdict = schema['~standard'].validate(value);
  if (verdict instanceof Promise) throw onIssue('the result schema is asynchronous; run() needs a synchronous one');
  const checked = verdict as { value?: T; issues?: readonly { message: string; path?: readonly unknown[] }[] };
  if (checked.issues !== undefined) {
    const first = checked.issues[0];
    const where =
      first?.path !== undefined && first.path.length > 0 ? `result.${first.path.map(String).join('.')}: ` : 'result: ';
    throw onIssue(`${where}${first?.message ?? 'invalid'}`);
  }
  return checked.value as T;
}

/** A stored result (replay, another attempt's settlement) checked against the schema. */
function storedResult<T>(schema: ResultSchema<T> | undefined, value: Json | null, where: string): T {
  return checkSchema(
    schema,
    value,
    (message) =>
      new StoredResultMismatchError(`${where} does not match the result schema (${message})`, {
        code: 'RESULT_SCHEMA_MISMATCH',
      }),
  );
}

/** The outcome with its result checked against the schema (completed by another attempt, replay). */
export function typed<T>(outcome: RunOutcome<Json>, schema: ResultSchema<T> | undefined): RunOutcome<T> {
  if (outcome.outcome === 'replay')
    return { ...outcome, result: storedResult(schema, outcome.result, 'the stored result (replay)') };
  if (outcome.outcome === 'completed') {
    return {
      ...outcome,
      result: storedResult(schema, outcome.result, `the settled result (attempt ${outcome.attempt})`),
    };
  }
  return outcome;
}

export async function runEffect<T>(
  client: SettleClient,
  input: RunInput,
  effect: (context: RunContext) => Promise<T>,
  options?: RunOptions<T>,
): Promise<RunOutcome<T>> {
  const call = callOptions(options);
  const leaseMs = input.leaseMs ?? 30_000;
  const schema = options?.result;
  let claimedAt = 0;
  let acquiredStatus: string | undefined;
  // Without reconcile (nor rerunAfterUnknown) this run() would refuse to run the effect after an
  // attempt reported unknown: ask the engine not to open an attempt then (it answers in_doubt,
  // which the claim loop maps to unknown / needs_reconciliation), rather than opening one only
  // to report it unknown again. run() decides this from its options: the input's own field is
  // overridden.
  const rerunAfterUnknown = options?.reconcile !== undefined || options?.rerunAfterUnknown === true;
  // Every attempt names its process (audit log, settle.attempts), unless the caller named it.
  const claimInput: RunInput =
    input.rerunAfterUnknown === rerunAfterUnknown && input.worker !== undefined
      ? input
      : { ...input, rerunAfterUnknown, worker: input.worker ?? DEFAULT_WORKER };
  const acquired = await claimLoop(
    input,
    async () => {
      claimedAt = Date.now();
      const claimed = await client.claim(claimInput, call);
      if (claimed.outcome !== 'acquired') return claimed;
      acquiredStatus = claimed.status;
      return { outcome: 'acquired', value: claimed.attempt };
    },
    options?.signal,
  );
  if (!('leaseToken' in acquired)) return typed(acquired, schema);
  const handle = acquired;
  const earlier: EarlierAttempts = {
    count: handle.attempt - 1,
    reportedUnknown: acquiredStatus === 'unknown',
    mayHaveTakenEffect: handle.attempt > 1,
  };

  const controller = new LazyAbortController();
  const onCallerAbort = (): void => controller.abort(options?.signal?.reason);
  options?.signal?.addEventListener('abort', onCallerAbort, { once: true });
  const keeper = keepLease(client, handle, {
    leaseMs,
    intervalMs: input.heartbeatIntervalMs ?? Math.max(1, Math.floor(leaseMs / 3)),
    localDeadline: claimedAt + leaseMs,
    controller,
    call,
  });
  const context: RunContext = {
    attempt: handle,
    attemptNumber: handle.attempt,
    earlier,
    get signal() {
      return controller.signal;
    },
    heartbeat: keeper.beatNow,
  };
  const stop = async (): Promise<void> => {
    options?.signal?.removeEventListener('abort', onCallerAbort);
    await keeper.stop();
  };

  // An earlier attempt may already have taken effect: reconcile first, or refuse to guess.
  if (earlier.mayHaveTakenEffect && options?.reconcile !== undefined) {
    let found: T | undefined;
    try {
      found = await options.reconcile(context);
    } catch (error) {
      await stop();
      return reportUnknownOutcome(client, handle, asError(error), 'reconcile_failed', call, schema);
    }
    if (found !== undefined) {
      await stop();
      const outcome = await settleSuccess(client, handle, found, call, schema, { ...input, leaseMs });
      return outcome.outcome === 'completed' && outcome.settledBy === 'this_attempt'
        ? { ...outcome, reconciled: true }
        : outcome;
    }
  } else if (earlier.reportedUnknown && options?.rerunAfterUnknown !== true) {
    // Not reached with this engine (the claim above asked for in_doubt instead of an attempt):
    // kept so that an attempt opened after an unknown never runs the effect blindly.
    await stop();
    const cause = new ReconciliationRequiredError(
      `attempt ${handle.attempt - 1} or earlier of ${handle.tenant}/${handle.key} reported unknown: its effect may have happened, and this run() has no reconcile to find out; the effect did not run`,
      { code: 'NEEDS_RECONCILIATION', hint: NEEDS_RECONCILIATION_HINT },
    );
    return reportUnknownOutcome(client, handle, cause, 'needs_reconciliation', call, schema);
  }

  let result: T;
  try {
    result = await effect(context);
  } catch (error) {
    await stop();
    return settleFailure(client, handle, error, input, call, schema);
  }
  await stop();
  return settleSuccess(client, handle, result, call, schema, { ...input, leaseMs });
}

export interface LeaseKeeper {
  beatNow(): Promise<HeartbeatOutcome>;
  stop(): Promise<void>;
}

export function keepLease(
  client: SettleClient,
  handle: AttemptHandle,
  opts: {
    leaseMs: number;
    intervalMs: number;
    localDeadline: number;
    controller: LazyAbortController;
    call: CallOptions;
  },
): LeaseKeeper {
  let deadline = opts.localDeadline;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inflight: Promise<unknown> = Promise.resolve();

  const beat = async (): Promise<HeartbeatOutcome> => {
    const startedAt = Date.now();
    try {
      const outcome = await client.heartbeat(handle, { ...opts.call, leaseMs: opts.leaseMs });
      if (outcome.outcome === 'fenced') {
        stopped = true;
        opts.controller.abort(new LeaseLostError(outcome.reason));
      } else {
        deadline = startedAt + opts.leaseMs;
      }
      return outcome;
    } catch (error) {
      if (Date.now() >= deadline) opts.controller.abort(new LeaseLostError('lease_expired', error));
      throw error;
    }
  };
  const beatNow = (): Promise<HeartbeatOutcome> => {
    const next = inflight.then(beat, beat);
    inflight = next.catch(() => {});
    return next;
  };
  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      void beatNow()
        .catch(() => {})
        .finally(schedule);
    }, opts.intervalMs);
  };
  schedule();
  return {
    beatNow,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await inflight;
    },
  };
}

/**
 * Stores the effect's (or reconcile's) result. A value that cannot be stored — not JSON, or not
 * what the schema accepts — means the effect ran and its result is lost: the attempt is
 * reported unknown (so no later run() re-runs the effect without reconciling) and one
 * EffectResultError is thrown. `undefined` (a void effect) is stored as null.
 */
async function settleSuccess<T>(
  client: SettleClient,
  handle: AttemptHandle,
  value: T,
  call: CallOptions,
  schema: ResultSchema<T> | undefined,
  lineage: { readonly leaseMs: number },
): Promise<RunOutcome<T>> {
  const stored = value === undefined ? null : value;
  const problem = findJsonProblem(stored);
  let result: Json;
  try {
    if (problem !== null) {
      const where = problem.path.length === 0 ? 'the value' : `result.${problem.path.join('.')}`;
      throw new EffectResultError(`${where}: ${problem.message}`, {
        code: 'EFFECT_RESULT',
        issues: [{ path: problem.path, message: problem.message }],
      });
    }
    checkSchema(schema, stored, (message) => new EffectResultError(message, { code: 'EFFECT_RESULT' }));
    result = stored as Json;
  } catch (error) {
    const reason = (error as Error).message;
    await client.reportUnknown(handle, call).catch(() => {});
    throw new EffectResultError(
      `the effect of ${handle.tenant}/${handle.key} attempt ${handle.attempt} ran, but its result cannot be stored (${reason}); the attempt was recorded as unknown, so no later run() runs the effect again unless it passes reconcile (which looks the effect up first) or rerunAfterUnknown; left alone, the operation goes to the reconciler (the dead_letter_in_doubt upkeep job)`,
      { code: 'EFFECT_RESULT', cause: error, issues: error instanceof SettleInputError ? error.issues : [] },
    );
  }
  let observation: Observation;
  try {
    observation = await client.complete(handle, result, call);
  } catch (error) {
    if (isAmbiguous(error)) return unknownOutcome(client, handle, error, call, { leaseMs: lineage.leaseMs, schema });
    if (error instanceof SettleInputError) {
      // The effect ran but its result cannot be stored: never let a retry believe it did not run.
      await client.reportUnknown(handle, call).catch(() => {});
    }
    throw error;
  }
  return typed(await fromObservation(client, handle, observation, call), schema);
}

export async function settleFailure<T>(
  client: SettleClient,
  handle: AttemptHandle,
  cause: unknown,
  input: RunInput,
  call: CallOptions,
  schema: ResultSchema<T> | undefined,
): Promise<RunOutcome<T>> {
  const classification = (input.classify ?? defaultClassify)(cause);
  if (classification === 'unknown')
    return reportUnknownOutcome(client, handle, asError(cause), 'effect_outcome_unknown', call, schema);
  let observation: Observation;
  const errorJson = (input.errorToJson ?? defaultErrorToJson)(cause);
  try {
    observation = await client.fail(handle, errorJson, { ...call, retryable: classification === 'retryable' });
  } catch (error) {
    if (isAmbiguous(error))
      return unknownOutcome(client, handle, error, call, { leaseMs: input.leaseMs ?? 30_000, schema });
    throw error;
  }
  return typed(await fromObservation(client, handle, observation, call, { cause, error: errorJson }), schema);
}

/**
 * Records this attempt as unknown (report_unknown) and answers `unknown` with `reason` — unless
 * the engine's answer shows the operation settled meanwhile (another attempt completed it: that
 * result), or this attempt lost its lease (fenced).
 */
async function reportUnknownOutcome<T>(
  client: SettleClient,
  handle: AttemptHandle,
  cause: Error,
  reason: UnknownReason,
  call: CallOptions,
  schema: ResultSchema<T> | undefined,
): Promise<RunOutcome<T>> {
  let observation: Observation;
  try {
    observation = await client.reportUnknown(handle, call);
  } catch (error) {
    if (isAmbiguous(error)) return { outcome: 'unknown', reason, attempt: handle.attempt, record: null, cause };
    throw error;
  }
  if (
    observation.outcome === 'recorded' ||
    observation.outcome === 'already_settled' ||
    observation.outcome === 'duplicate'
  ) {
    if (observation.status === 'completed') return typed(fromState(handle, observation, null, undefined), schema);
    return { outcome: 'unknown', reason, attempt: handle.attempt, record: null, cause };
  }
  return typed(await fromObservation(client, handle, observation, call, { cause, error: null }), schema);
}

/** The lock-gated re-read of the handle's operation (settle.get); null when it cannot be made. */
async function readLocked(client: SettleClient, handle: AttemptHandle, call: CallOptions): Promise<LockedRead | null> {
  if (handle.request === undefined) return null;
  return client
    .get({ tenant: handle.tenant, key: handle.key, request: handle.request, binding: handle.binding }, call)
    .catch(() => null);
}

/** Maps the answer of complete()/fail() in run() to a RunOutcome. */
export async function fromObservation(
  client: SettleClient,
  handle: AttemptHandle,
  observation: Observation,
  call: CallOptions,
  failure?: { readonly cause: unknown; readonly error: Json },
): Promise<RunOutcome> {
  const cause = failure?.cause;
  const withCause = failure === undefined ? {} : { cause };
  if (observation.outcome === 'conflict') return { outcome: 'conflict', conflictOn: observation.conflictOn };
  if (
    observation.outcome === 'fenced' &&
    (observation.reason === 'invalid_token' || observation.reason === 'binding_revoked')
  ) {
    return { outcome: 'fenced', reason: observation.reason, attempt: handle.attempt, ...withCause };
  }
  if (observation.outcome === 'recorded' && observation.reason === 'retryable_failure') {
    // The canonical record holds no error while retries remain: report the one we recorded.
    return {
      outcome: 'failed',
      error: failure?.error ?? null,
      final: false,
      deadLettered: false,
      attempt: handle.attempt,
      ...withCause,
    };
  }
  if (observation.outcome === 'settled' && observation.reason === 'final_failure') {
    return {
      outcome: 'failed',
      error: observation.error,
      final: true,
      deadLettered: false,
      attempt: handle.attempt,
      ...withCause,
    };
  }
  if (observation.outcome === 'settled' && observation.reason === 'attempts_exhausted') {
    return {
      outcome: 'failed',
      error: observation.error,
      final: true,
      deadLettered: true,
      attempt: handle.attempt,
      ...withCause,
    };
  }
  return fromState(handle, observation, observation.outcome === 'fenced' ? observation.reason : null, cause);
}

function fromState(
  handle: AttemptHandle,
  state: CanonicalState,
  fenceReason: HeartbeatFenceReason | null,
  cause: unknown,
): RunOutcome {
  const withCause = cause === undefined ? {} : { cause };
  if (state.status === 'completed') {
    return {
      outcome: 'completed',
      result: state.result,
      attempt: handle.attempt,
      settledBy: state.settledAttempt === handle.attempt ? 'this_attempt' : 'other_attempt',
    };
  }
  if (state.status === 'failed') {
    // The observation row carries dead_lettered: no second round trip to learn it.
    return {
      outcome: 'failed',
      error: state.error,
      final: true,
      deadLettered: state.deadLettered,
      attempt: handle.attempt,
      ...withCause,
    };
  }
  return { outcome: 'fenced', reason: fenceReason ?? 'lease_released', attempt: handle.attempt, ...withCause };
}

/**
 * Whether `record` is the operation `handle` was claimed on, not a later one under the same key
 * (purged, then claimed again): the same reservation lock (fingerprint and binding) and created
 * no later than this attempt's claim (the lease the claim granted, minus its length: both by the
 * database clock). A key names one operation at a time, so a record that existed when this
 * attempt was claimed is that operation.
 */
export function sameReservation(record: LockedRead, handle: AttemptHandle, leaseMs: number): boolean {
  // `found` means the engine compared the reservation lock (fingerprint and binding) with the
  // one this handle presents (settle.get is gated by it): only the creation time is left to check.
  const claimedAt = handle.leaseExpiresAt.getTime() - leaseMs;
  return record.outcome === 'found' && record.createdAt.getTime() <= claimedAt + 1;
}

/**
 * The settle call failed ambiguously: report unknown (best effort) and re-read. The re-read
 * answers `completed` only when it proves lineage: the record is this reservation's (same
 * fingerprint and binding, created before this attempt's claim: sameReservation) and completed;
 * anything else is `unknown` (reason `lineage_unproven` when a completed record is not provably
 * ours: e.g. the key was purged and claimed again by someone else meanwhile). After an
 * unconfirmed commit (SettleCommitUnconfirmedError) the local record is what is not confirmed:
 * the answer stays `unknown` with that record, and nothing more is written (a report_unknown
 * would only wait for the same standby).
 */
export async function unknownOutcome<T = Json>(
  client: SettleClient,
  handle: AttemptHandle,
  cause: Error,
  call: CallOptions,
  opts: { readonly leaseMs?: number; readonly schema?: ResultSchema<T> | undefined } = {},
): Promise<RunOutcome<T>> {
  const unconfirmed = cause instanceof SettleCommitUnconfirmedError;
  if (!unconfirmed) await client.reportUnknown(handle, call).catch(() => {});
  const record = await readLocked(client, handle, call);
  if (record !== null && record.outcome === 'conflict' && !unconfirmed) {
    // The key now holds another reservation (purged, then claimed with another lock).
    return { outcome: 'unknown', reason: 'lineage_unproven', attempt: handle.attempt, record: null, cause };
  }
  if (record !== null && record.outcome === 'found' && record.status === 'completed' && !unconfirmed) {
    if (!sameReservation(record, handle, opts.leaseMs ?? 30_000)) {
      return { outcome: 'unknown', reason: 'lineage_unproven', attempt: handle.attempt, record: null, cause };
    }
    return {
      outcome: 'completed',
      result: storedResult(opts.schema, record.result, `the settled result (attempt ${record.settledAttempt ?? '?'})`),
      attempt: handle.attempt,
      settledBy: record.settledAttempt === handle.attempt ? 'this_attempt' : 'other_attempt',
    };
  }
  return { outcome: 'unknown', reason: 'settle_call_failed', attempt: handle.attempt, record, cause };
}
