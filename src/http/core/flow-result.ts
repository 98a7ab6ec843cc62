import {
  SettleCommitUnconfirmedError,
  SettleConnectionError,
  SettleInputError,
  SettleTimeoutError,
} from '../../client/errors.js';
import type { ClaimOutcome, ConflictField } from '../../client/types.js';
import { replayAnswer, retryAfterSeconds } from './answers.js';
import type { IdempotencyContext } from './context.js';
import type { Resolved } from './options.js';
import { type HttpAnswer, problem } from './problem.js';
import type { CapturedResponse } from './stored-response.js';

/**
 * What the adapter does next:
 * - `pass`: not ours (method, or no key on an optional route): run the handler untouched;
 * - `answer`: send this; the handler did not run, or ran but another attempt's response is canonical;
 * - `captured`: send what the handler produced (stream the rest when it overflowed the limit).
 */
export type FlowResult =
  | { readonly kind: 'pass' }
  | { readonly kind: 'answer'; readonly answer: HttpAnswer }
  | { readonly kind: 'captured' };

/** Starts the handler with its context; resolves when its response is complete or overflowed. */
export type RunHandler = (context: IdempotencyContext) => Promise<CapturedResponse>;

const TIMEOUT = Symbol('timeout');

export const isAmbiguous = (error: unknown): boolean =>
  error instanceof SettleConnectionError || error instanceof SettleTimeoutError || error instanceof SettleCommitUnconfirmedError;

/** Resolves to the handler's response, or TIMEOUT after `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMEOUT> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMEOUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMEOUT), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
export { TIMEOUT };

export const answer = (a: HttpAnswer): FlowResult => ({ kind: 'answer', answer: a });

/** A database that cannot be reached before the handler ran: 503, nothing executed. */
export function storeError(error: unknown, o: Resolved<never>): FlowResult {
  if (isAmbiguous(error)) {
    return answer(problem('settlement-unavailable', o.problemTypeBase, 'the idempotency store did not answer; nothing was executed', {}, { 'retry-after': '1' }));
  }
  if (error instanceof SettleInputError) {
    return answer(problem('idempotency-misconfigured', o.problemTypeBase, `the key, binding or request was refused: ${error.message}`));
  }
  throw error;
}

/** The answer to a claim (or run) outcome that did not run the handler here. */
export function notAcquired(
  claimed:
    | Exclude<ClaimOutcome, { outcome: 'acquired' }>
    | { readonly outcome: 'conflict'; readonly conflictOn: readonly ConflictField[] }
    | { readonly outcome: 'refused'; readonly reason: 'binding_revoked' },
  o: Resolved<never>,
): FlowResult {
  switch (claimed.outcome) {
    case 'replay':
      return answer(replayAnswer(claimed.result, o));
    case 'conflict':
      return claimed.conflictOn.includes('request')
        ? answer(problem('idempotency-key-reused', o.problemTypeBase, 'this key was first used with a different request (method, route, body or fingerprinted headers)'))
        : answer(problem('idempotency-key-bound', o.problemTypeBase, 'this key is reserved for another caller or authorization; use a new key'));
    case 'refused':
      return answer(problem('idempotency-key-bound', o.problemTypeBase, 'the authorization generation presented was revoked; re-authenticate and read the operation before issuing it again'));
    case 'in_progress':
      return answer(
        problem('request-in-progress', o.problemTypeBase, 'the first request with this key has not finished; retry later', {}, {
          'retry-after': retryAfterSeconds(claimed.retryAfterMs),
        }),
      );
    case 'failed':
      return answer(
        problem('operation-failed', o.problemTypeBase, 'the request with this key failed for good; use a new key', {
          deadLettered: claimed.deadLettered,
        }),
      );
    case 'unknown':
      return answer(
        problem('operation-needs-reconciliation', o.problemTypeBase,
          'the attempts for this key ran out and one may have taken effect; nothing runs again until an operator reconciles it', {
            deadLettered: true,
          }),
      );
  }
}
