// settle.idempotent(fn, options): wrap an async function once, call it as before, and every call
// goes through run() under a key derived from its arguments (in the style of AWS Powertools'
// makeIdempotent). A settled call answers with its result; every other run() outcome is thrown as
// a typed IdempotentCallError subclass carrying the outcome, so the wrapped function keeps its
// parameter and return types.
import { AsyncLocalStorage } from 'node:async_hooks';
import {
  AttemptFencedError,
  BindingRevokedError,
  IdempotencyConflictError,
  type IdempotentCallError,
  OperationFailedError,
  OperationInProgressError,
  OutcomeUnknownError,
  type UnsettledOutcome,
} from './errors.js';
import type {
  IdempotentOptions,
  PerCall,
  RunContext,
  RunInput,
  RunOptions,
  SettleClient,
  RunOutcome,
  VoidToNull,
} from './types.js';

export type { IdempotentOptions, PerCall } from './types.js';

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
export function unsettledError(
  outcome: UnsettledOutcome,
  ref: { readonly tenant: string; readonly key: string },
): IdempotentCallError {
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
      return new BindingRevokedError(
        `${id}: the binding generation is revoked; nothing ran`,
        outcome,
        ref,
        'BINDING_REVOKED',
      );
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
      return new AttemptFencedError(
        `${id}: attempt ${outcome.attempt} lost its lease (${outcome.reason})`,
        outcome,
        ref,
        'ATTEMPT_FENCED',
      );
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
    // R is JSON unless a result schema says otherwise (findJsonProblem checks it at run time).
    const effect = (context: RunContext) => contexts.run(context, () => fn(...args));
    const run = client.run as (i: RunInput, e: typeof effect, o: RunOptions<R>) => Promise<RunOutcome<VoidToNull<R>>>;
    const outcome = await run.call(client, input, effect, runOptions);
    if (outcome.outcome === 'completed' || outcome.outcome === 'replay') return outcome.result as R;
    throw unsettledError(outcome, input);
  };
}
