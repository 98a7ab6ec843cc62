// settle.idempotent(fn, options): wrap an async function once, call it as before, and every call
// goes through run() under a key derived from its arguments (in the style of AWS Powertools'
// makeIdempotent). A settled call answers with its result; every other run() outcome is thrown as
// a typed IdempotentCallError subclass carrying the outcome, so the wrapped function keeps its
// parameter and return types.
import { AsyncLocalStorage } from 'node:async_hooks';
import { SettleError } from './errors.js';
import type {
  ConflictField,
  HeartbeatFenceReason,
  IdempotentOptions,
  PerCall,
  RunContext,
  RunInput,
  RunOptions,
  RunOutcome,
  SettleClient,
  UnknownReason,
} from './types.js';

export type { IdempotentOptions, PerCall } from './types.js';

/** The run() outcomes that are not a settled result: what an idempotent call throws. */
export type UnsettledOutcome = Exclude<RunOutcome<never>, { readonly outcome: 'completed' | 'replay' }>;

/**
 * Thrown by a function wrapped with `settle.idempotent()` for every run() outcome other than a
 * result (`completed`, `replay`): `outcome` is run()'s answer, `tenant` and `key` the operation.
 * Catch a subclass for one outcome, or this class and switch on `outcome.outcome`.
 */
export class IdempotentCallError extends SettleError {
  /** run()'s answer for this call. */
  readonly outcome: UnsettledOutcome;
  /** The operation's tenant. */
  readonly tenant: string;
  /** The operation's idempotency key. */
  readonly key: string;

  constructor(message: string, outcome: UnsettledOutcome, ref: { readonly tenant: string; readonly key: string }, code: string) {
    const cause = 'cause' in outcome ? outcome.cause : undefined;
    super(message, { code, cause, detail: { tenant: ref.tenant, key: ref.key } });
    this.outcome = outcome;
    this.tenant = ref.tenant;
    this.key = ref.key;
  }
}

/**
 * `in_progress`: another call holds the key's lease after `waitForMs`; nothing ran here. Retry
 * after `retryAfterMs` (a completed call is then replayed).
 */
export class OperationInProgressError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'in_progress' }>;
  /** Milliseconds until the holder's lease lapses, by the database clock. */
  get retryAfterMs(): number {
    return this.outcome.retryAfterMs;
  }
}

/**
 * `conflict`: the key is reserved for another request (`conflictOn: ['request']`, the call's
 * arguments differ from the first call's) or another binding (`['binding']`); nothing ran and
 * nothing of the other call is disclosed. Use a new key for a new intent.
 */
export class IdempotencyConflictError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'conflict' }>;
  /** What differs from the reservation. */
  get conflictOn(): readonly ConflictField[] {
    return this.outcome.conflictOn;
  }
}

/** `refused`: the binding generation presented is revoked (settle.revoke_binding); nothing ran. */
export class BindingRevokedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'refused' }>;
}

/**
 * `failed`: the function threw an error classified retryable or final (`cause` is what it threw),
 * or the operation had failed before. `final: false`: a later call with the same arguments opens
 * a new attempt and runs the function again; `deadLettered`: the attempt budget is spent.
 */
export class OperationFailedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'failed' }>;
  /** No later call will run the function (a final failure, or dead-lettered). */
  get final(): boolean {
    return this.outcome.final;
  }
  /** The attempt budget is spent: the operation is dead-lettered (an operator may redrive it). */
  get deadLettered(): boolean {
    return this.outcome.deadLettered;
  }
}

/**
 * `unknown`: the function may or may not have taken effect (a timeout, an abort, a lost
 * connection; or an earlier attempt did and there is no `reconcile`). Never a failure: retry
 * with the same arguments later; `reason` says why it is not known.
 */
export class OutcomeUnknownError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'unknown' }>;
  /** Why the outcome is not known (run()'s `UnknownReason`). */
  get reason(): UnknownReason {
    return this.outcome.reason;
  }
}

/** `fenced`: this call's attempt lost its lease while the function ran; another attempt owns the operation. */
export class AttemptFencedError extends IdempotentCallError {
  declare readonly outcome: Extract<UnsettledOutcome, { readonly outcome: 'fenced' }>;
  /** Why the lease was lost. */
  get reason(): HeartbeatFenceReason {
    return this.outcome.reason;
  }
}

const contexts = new AsyncLocalStorage<RunContext>();

/**
 * Inside a function wrapped with `settle.idempotent()`: the attempt's run() context (its
 * `signal`, aborted when the lease is lost; `heartbeat()`; the attempt number and the earlier
 * attempts). `undefined` anywhere else.
 */
export function idempotencyContext(): RunContext | undefined {
  return contexts.getStore();
}

const perCall = <A extends readonly unknown[], V>(value: PerCall<A, V>, args: A): V =>
  typeof value === 'function' ? (value as (...args: A) => V)(...args) : value;

/** The error an unsettled outcome is thrown as. */
export function unsettledError(outcome: UnsettledOutcome, ref: { readonly tenant: string; readonly key: string }): IdempotentCallError {
  const id = `${ref.tenant}/${ref.key}`;
  switch (outcome.outcome) {
    case 'in_progress':
      return new OperationInProgressError(
        `${id}: another call holds attempt ${outcome.attempt}; retry after ${outcome.retryAfterMs} ms`,
        outcome,
        ref,
        'OPERATION_IN_PROGRESS',
      );
    case 'conflict':
      return new IdempotencyConflictError(
        `${id}: the key is reserved for another ${outcome.conflictOn.join(' and ')}; nothing ran (use a new key for a new intent)`,
        outcome,
        ref,
        'IDEMPOTENCY_CONFLICT',
      );
    case 'refused':
      return new BindingRevokedError(`${id}: the binding generation is revoked; nothing ran`, outcome, ref, 'BINDING_REVOKED');
    case 'failed':
      return new OperationFailedError(
        `${id}: attempt ${outcome.attempt} failed${outcome.deadLettered ? ' (dead-lettered)' : outcome.final ? ' (final)' : ' (retryable: a later call runs it again)'}`,
        outcome,
        ref,
        'OPERATION_FAILED',
      );
    case 'unknown':
      return new OutcomeUnknownError(
        `${id}: the outcome of attempt ${outcome.attempt} is unknown (${outcome.reason}); retry later with the same arguments`,
        outcome,
        ref,
        'OUTCOME_UNKNOWN',
      );
    case 'fenced':
      return new AttemptFencedError(`${id}: attempt ${outcome.attempt} lost its lease (${outcome.reason})`, outcome, ref, 'ATTEMPT_FENCED');
  }
}

/** settle.idempotent(): the wrapper over `client.run()` (see IdempotentOptions). */
export function makeIdempotent<A extends readonly unknown[], R>(
  client: SettleClient,
  fn: (...args: A) => Promise<R>,
  options: IdempotentOptions<A, R>,
): (...args: A) => Promise<R> {
  const { tenant, key, request, binding, result, reconcile, rerunAfterUnknown, ...settings } = options;
  return async (...args: A): Promise<R> => {
    const input: RunInput = {
      ...settings,
      tenant: perCall(tenant, args),
      key: key(...args),
      request: request(...args),
      binding: perCall(binding, args),
    };
    const runOptions: RunOptions<R> = {
      ...(result === undefined ? {} : { result }),
      ...(reconcile === undefined ? {} : { reconcile: (context: RunContext) => reconcile(context, ...args) }),
      ...(rerunAfterUnknown === undefined ? {} : { rerunAfterUnknown }),
    };
    const outcome = await client.run<R>(input, (context) => contexts.run(context, () => fn(...args)), runOptions);
    if (outcome.outcome === 'completed' || outcome.outcome === 'replay') return outcome.result as R;
    throw unsettledError(outcome, input);
  };
}
