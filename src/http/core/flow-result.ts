import {
  SettleCommitUnconfirmedError,
  SettleConnectionError,
  SettleDatabaseError,
  SettleInputError,
  SettleNotMigratedError,
  SettleReadOnlyError,
  SettleTimeoutError,
  TenantNotGrantedError,
} from '../../client/errors.js';
import type { ClaimOutcome, ConflictField } from '../../client/types.js';
import { replayAnswer, retryAfterSeconds } from './answers.js';
import type { IdempotencyContext } from './context.js';
import type { Resolved } from './options.js';
import { type HttpAnswer, problem } from './problem.js';
import type { CapturedResponse } from '../../client/stored-response.js';

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
  error instanceof SettleConnectionError ||
  error instanceof SettleTimeoutError ||
  error instanceof SettleCommitUnconfirmedError;

/** Resolves to the handler's response, or TIMEOUT after `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMEOUT> {
  // One promise and one timer per request (Promise.race and finally made three more promises).
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => resolve(TIMEOUT), ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
export { TIMEOUT };

export const answer = (a: HttpAnswer): FlowResult => ({ kind: 'answer', answer: a });

/** Answers the middleware made because the deployment is set up wrong (counted as `misconfigured`). */
export const MISCONFIGURED = new WeakSet<HttpAnswer>();

/** What the operator is told about a misconfiguration; the caller gets only a plain 500. */
export class IdempotencyMisconfiguredError extends Error {
  constructor(detail: string, cause: unknown) {
    super(`pg-settle idempotency middleware: ${detail}`, { cause });
    this.name = 'IdempotencyMisconfiguredError';
  }
}

/** 503 settlement-unavailable with Retry-After: the same key will get an answer later. */
export const unavailable = (o: Resolved<never>, detail: string): FlowResult =>
  answer(problem('settlement-unavailable', o.problemTypeBase, detail, {}, { 'retry-after': '1' }));

/**
 * A database that cannot be reached, or is read-only (25006: a standby after a failover), before
 * the handler ran: 503, nothing executed, nothing of the engine's error disclosed. A server set
 * up wrong: the operator gets the cause (`report`: onMisconfiguration, default console.error,
 * and the `misconfigured` result of pg_settle.http.requests); the caller a plain 500 that
 * discloses nothing of the deployment (no SQLSTATE, no function to grant). `executed`: the
 * handler ran before the store refused to record its response (a grant revoked meanwhile), so
 * both are told the request may have taken effect, never that nothing was executed.
 */
export function storeError(
  error: unknown,
  o: Resolved<never>,
  report: (error: IdempotencyMisconfiguredError) => void = defaultReport,
  executed = false,
): FlowResult {
  if (isAmbiguous(error)) return unavailable(o, 'the idempotency store did not answer; nothing was executed');
  if (error instanceof SettleReadOnlyError)
    return unavailable(o, 'the idempotency store cannot record requests right now; nothing was executed');
  const misconfigured = misconfiguration(error);
  if (misconfigured !== null) {
    const what = executed ? 'the request may have taken effect, its response was not recorded' : 'nothing was executed';
    try {
      report(new IdempotencyMisconfiguredError(`${misconfigured}; ${what}`, error));
    } catch {
      // A logger that throws must not turn the answer into a crash.
    }
    const plain = problem(
      'idempotency-misconfigured',
      o.problemTypeBase,
      `the server cannot process requests with an Idempotency-Key right now; ${what}`,
    );
    MISCONFIGURED.add(plain);
    return answer(plain);
  }
  throw error;
}

function defaultReport(error: IdempotencyMisconfiguredError): void {
  console.error(error.message);
}

/**
 * Errors that say the server is set up wrong, not that the request is: the login role is not
 * granted the binding's tenant (SE013), lacks settle_app (42501), the database is not migrated,
 * or the engine refused the key, binding or request the middleware built. 500 without
 * Retry-After: retrying cannot help until an operator fixes the deployment (docs/http.md).
 * Nothing is disclosed beyond the class of the problem: the SQLSTATE, not the message.
 */
function misconfiguration(error: unknown): string | null {
  if (error instanceof TenantNotGrantedError) {
    return "the server's database login is not granted this tenant (SE013, settle.grant_tenant)";
  }
  if (error instanceof SettleNotMigratedError) return 'the idempotency store is not migrated';
  if (error instanceof SettleDatabaseError && error.sqlstate === '42501') {
    return "the server's database login may not call the idempotency store (42501: grant settle_app)";
  }
  if (error instanceof SettleInputError) return `the key, binding or request was refused (${error.code})`;
  return null;
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
        ? answer(
            problem(
              'idempotency-key-reused',
              o.problemTypeBase,
              'this key was first used with a different request (method, path, query string, body or fingerprinted headers)',
            ),
          )
        : answer(
            problem(
              'idempotency-key-bound',
              o.problemTypeBase,
              'this key is reserved for another caller or authorization; use a new key',
            ),
          );
    case 'refused':
      return answer(
        problem(
          'idempotency-key-bound',
          o.problemTypeBase,
          'the authorization generation presented was revoked; re-authenticate and read the operation before issuing it again',
        ),
      );
    case 'in_progress':
      return answer(
        problem(
          'request-in-progress',
          o.problemTypeBase,
          'the first request with this key has not finished; retry later',
          {},
          {
            'retry-after': retryAfterSeconds(claimed.retryAfterMs),
          },
        ),
      );
    case 'failed':
      return answer(
        problem('operation-failed', o.problemTypeBase, 'the request with this key failed for good; use a new key', {
          deadLettered: claimed.deadLettered,
        }),
      );
    case 'unknown':
      return outcomeUnknown(o, true);
    case 'in_doubt':
      return outcomeUnknown(o, false);
  }
}

/**
 * An earlier attempt may have taken effect and this route does not run the handler again: the
 * same answer for every retry (Stripe replays an in-doubt request's 500 to every retry with the
 * key), 500 without Retry-After, since retrying the key cannot change it; `deadLettered` says
 * whether the key is already in the operators' queue (needs_reconciliation).
 */
export function outcomeUnknown(o: Resolved<never>, deadLettered: boolean, waiting = false): FlowResult {
  if (waiting) {
    // beforeRerun said wait: the downstream may still tell; a later retry can change the answer.
    return answer(
      problem(
        'outcome-unknown',
        o.problemTypeBase,
        'an earlier request with this key may have taken effect and its outcome is not known yet; retry later with the same key',
        {
          deadLettered,
        },
        { 'retry-after': '1' },
      ),
    );
  }
  return answer(
    problem(
      'outcome-unknown',
      o.problemTypeBase,
      'an earlier request with this key may have taken effect and its outcome is unknown; it is not run again until it is reconciled',
      {
        deadLettered,
      },
    ),
  );
}
