import {
  mapDatabaseError,
  SettleCommitUnconfirmedError,
  SettleConnectionError,
  SettleError,
  SettleInputError,
  SettleTimeoutError,
} from './errors.js';
import { sleep } from './retry.js';
import type {
  AttemptHandle,
  CallOptions,
  CanonicalState,
  ClaimInput,
  ConflictField,
  HeartbeatFenceReason,
  HeartbeatOutcome,
  Json,
  Observation,
  OperationRecord,
  RunContext,
  RunInput,
  RunOptions,
  RunOutcome,
  SettleClient,
} from './types.js';

export type { Classification, RunContext, RunInput, RunOptions, RunOutcome } from './types.js';

/** Why `signal` was aborted. */
export class LeaseLostError extends SettleError {
  readonly reason: HeartbeatFenceReason | 'lease_expired';
  constructor(reason: HeartbeatFenceReason | 'lease_expired', cause?: unknown) {
    super(`lease lost: ${reason}`, { code: 'LEASE_LOST', cause });
    this.reason = reason;
  }
}

const FIRST_WAIT_MS = 25;
const MAX_WAIT_MS = 1_000;

/** { name, message, code? }: the class name, the message, and the SQLSTATE or error code if any. */
export function defaultErrorToJson(error: unknown): Json {
  if (!(error instanceof Error)) return { message: String(error) };
  const mapped = mapDatabaseError(error);
  const code = mapped instanceof SettleError ? mapped.code : (error as { code?: unknown }).code;
  const name = error.name === 'Error' ? error.constructor.name : error.name;
  return { name, message: error.message, ...(typeof code === 'string' ? { code } : {}) };
}

export const isAmbiguous = (error: unknown): error is Error =>
  error instanceof SettleConnectionError || error instanceof SettleTimeoutError || error instanceof SettleCommitUnconfirmedError;

const callOptions = (options: RunOptions | undefined): CallOptions =>
  options?.connection === undefined ? {} : { connection: options.connection };

/**
 * Claims until acquired, settled, conflicting, or waitForMs spent on someone else's lease;
 * `onAcquired` runs the attempt. Shared by run() and runInTransaction().
 */
export async function claimLoop<R>(
  input: RunInput,
  claim: () => Promise<
    | { readonly outcome: 'acquired'; readonly value: R }
    | Exclude<Awaited<ReturnType<SettleClient['claim']>>, { outcome: 'acquired' }>
  >,
): Promise<R | RunOutcome> {
  const deadline = Date.now() + (input.waitForMs ?? 5_000);
  for (let wait = FIRST_WAIT_MS; ; wait = Math.min(wait * 2, MAX_WAIT_MS)) {
    const claimed = await claim();
    switch (claimed.outcome) {
      case 'acquired':
        return claimed.value;
      case 'replay':
        return { outcome: 'replay', result: claimed.result, settledAttempt: claimed.settledAttempt };
      case 'conflict':
        return { outcome: 'conflict', conflictOn: claimed.conflictOn };
      case 'failed':
        return { outcome: 'failed', error: claimed.error, final: true, deadLettered: claimed.deadLettered, attempt: claimed.attempt };
      case 'in_progress': {
        const remaining = deadline - Date.now();
        if (remaining <= 0) {
          const { attempt, leaseExpiresAt, retryAfterMs } = claimed;
          return { outcome: 'in_progress', attempt, leaseExpiresAt, retryAfterMs };
        }
        const jittered = wait / 2 + Math.random() * (wait / 2);
        await sleep(Math.max(1, Math.min(jittered, claimed.retryAfterMs, remaining)));
      }
    }
  }
}

export async function runEffect(
  client: SettleClient,
  input: RunInput,
  effect: (context: RunContext) => Promise<Json>,
  options?: RunOptions,
): Promise<RunOutcome> {
  const call = callOptions(options);
  const leaseMs = input.leaseMs ?? 30_000;
  let claimedAt = 0;
  const acquired = await claimLoop(input, async () => {
    claimedAt = Date.now();
    const claimed = await client.claim(input, call);
    return claimed.outcome === 'acquired' ? { outcome: 'acquired', value: claimed.attempt } : claimed;
  });
  if (!('leaseToken' in acquired)) return acquired;
  const handle = acquired;

  const controller = new AbortController();
  const keeper = keepLease(client, handle, {
    leaseMs,
    intervalMs: input.heartbeatIntervalMs ?? Math.max(1, Math.floor(leaseMs / 3)),
    localDeadline: claimedAt + leaseMs,
    controller,
    call,
  });
  let result: Json;
  try {
    result = await effect({ attempt: handle, signal: controller.signal, heartbeat: keeper.beatNow });
  } catch (error) {
    await keeper.stop();
    return settleFailure(client, handle, error, input, call);
  }
  await keeper.stop();
  return settleSuccess(client, handle, result, call);
}

interface LeaseKeeper {
  beatNow(): Promise<HeartbeatOutcome>;
  stop(): Promise<void>;
}

function keepLease(
  client: SettleClient,
  handle: AttemptHandle,
  opts: { leaseMs: number; intervalMs: number; localDeadline: number; controller: AbortController; call: CallOptions },
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
      void beatNow().catch(() => {}).finally(schedule);
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

async function settleSuccess(client: SettleClient, handle: AttemptHandle, result: Json, call: CallOptions): Promise<RunOutcome> {
  let observation: Observation;
  try {
    observation = await client.complete(handle, result, call);
  } catch (error) {
    if (isAmbiguous(error)) return unknownOutcome(client, handle, error, call);
    if (error instanceof SettleInputError) {
      // The effect ran but its result cannot be stored: never let a retry believe it did not run.
      await client.reportUnknown(handle, call).catch(() => {});
    }
    throw error;
  }
  return fromObservation(client, handle, observation, call);
}

async function settleFailure(
  client: SettleClient,
  handle: AttemptHandle,
  cause: unknown,
  input: RunInput,
  call: CallOptions,
): Promise<RunOutcome> {
  const retryable = (input.classify ?? (() => 'retryable'))(cause) === 'retryable';
  let observation: Observation;
  const errorJson = (input.errorToJson ?? defaultErrorToJson)(cause);
  try {
    observation = await client.fail(handle, errorJson, { ...call, retryable });
  } catch (error) {
    if (isAmbiguous(error)) return unknownOutcome(client, handle, error, call);
    throw error;
  }
  return fromObservation(client, handle, observation, call, { cause, error: errorJson });
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
  if (observation.outcome === 'fenced' && observation.reason === 'invalid_token') {
    return { outcome: 'fenced', reason: 'invalid_token', attempt: handle.attempt, ...withCause };
  }
  if (observation.outcome === 'recorded' && observation.reason === 'retryable_failure') {
    // The canonical record holds no error while retries remain: report the one we recorded.
    return { outcome: 'failed', error: failure?.error ?? null, final: false, deadLettered: false, attempt: handle.attempt, ...withCause };
  }
  if (observation.outcome === 'settled' && observation.reason === 'final_failure') {
    return { outcome: 'failed', error: observation.error, final: true, deadLettered: false, attempt: handle.attempt, ...withCause };
  }
  if (observation.outcome === 'settled' && observation.reason === 'attempts_exhausted') {
    return { outcome: 'failed', error: observation.error, final: true, deadLettered: true, attempt: handle.attempt, ...withCause };
  }
  return fromState(client, handle, observation, call, observation.outcome === 'fenced' ? observation.reason : null, cause);
}

async function fromState(
  client: SettleClient,
  handle: AttemptHandle,
  state: CanonicalState,
  call: CallOptions,
  fenceReason: HeartbeatFenceReason | null,
  cause: unknown,
): Promise<RunOutcome> {
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
    const record = await client.get(handle, call).catch(() => null);
    return {
      outcome: 'failed',
      error: state.error,
      final: true,
      deadLettered: record?.deadLetteredAt != null,
      attempt: handle.attempt,
      ...withCause,
    };
  }
  return { outcome: 'fenced', reason: fenceReason ?? 'lease_released', attempt: handle.attempt, ...withCause };
}

/**
 * The settle call failed ambiguously: report unknown (best effort) and re-read. A re-read that
 * shows the operation completed answers `completed`; anything else is `unknown`. After an
 * unconfirmed commit (SettleCommitUnconfirmedError) the local record is what is not confirmed:
 * the answer stays `unknown` with that record, and nothing more is written (a report_unknown
 * would only wait for the same standby).
 */
export async function unknownOutcome(
  client: SettleClient,
  handle: AttemptHandle,
  cause: Error,
  call: CallOptions,
): Promise<RunOutcome> {
  const unconfirmed = cause instanceof SettleCommitUnconfirmedError;
  if (!unconfirmed) await client.reportUnknown(handle, call).catch(() => {});
  const record = await client.get(handle, call).catch(() => null);
  if (record !== null && record.status === 'completed' && !unconfirmed) {
    return {
      outcome: 'completed',
      result: record.result,
      attempt: handle.attempt,
      settledBy: record.settledAttempt === handle.attempt ? 'this_attempt' : 'other_attempt',
    };
  }
  return { outcome: 'unknown', attempt: handle.attempt, record, cause };
}
