/**
 * How run() records an effect that threw:
 * - `unknown`: the effect may or may not have happened (a timeout, an abort, a connection lost
 *   mid-request). Recorded with report_unknown: never a failure, the operation stays open to a
 *   later attempt, which reconciles first (see RunOptions.reconcile).
 * - `retryable`: it definitely did not happen, and a later attempt may try again (fail, retryable).
 * - `final`: it definitely did not happen, and never will (fail, not retryable: the operation
 *   is settled `failed`).
 */
export type Classification = 'retryable' | 'final' | 'unknown';

/** Error names that mean "we stopped waiting", not "it did not happen". */
const UNKNOWN_NAMES = new Set(['AbortError', 'TimeoutError']);

/** Socket and timer codes of Node and undici that lose the answer of a request in flight. */
const UNKNOWN_CODES = new Set([
  'ETIMEDOUT',
  'ECONNRESET',
  'EPIPE',
  'ESOCKETTIMEDOUT',
  'ECONNABORTED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_ABORTED',
  'ABORT_ERR',
]);

interface ErrorLike {
  readonly name?: unknown;
  readonly code?: unknown;
  readonly message?: unknown;
  readonly cause?: unknown;
}

function isUnknownOne(error: ErrorLike, top: boolean): boolean {
  if (typeof error.name === 'string' && UNKNOWN_NAMES.has(error.name)) return true;
  if (typeof error.code === 'string' && UNKNOWN_CODES.has(error.code)) return true;
  // node:http's "socket hang up" carries ECONNRESET; the message alone is matched too because
  // some clients rewrap it without the code.
  if (typeof error.message === 'string' && error.message === 'socket hang up') return true;
  // fetch() rejects with TypeError('fetch failed') whose cause is the network error; a TypeError
  // without a cause is a bug, not a network failure.
  if (top && error instanceof TypeError && error.message === 'fetch failed') return true;
  return false;
}

/**
 * True for errors that lose the outcome of a request in flight: `AbortError`, `TimeoutError`
 * (AbortSignal.timeout), the codes ETIMEDOUT, ECONNRESET, EPIPE, ESOCKETTIMEDOUT, ECONNABORTED,
 * ABORT_ERR and undici's UND_ERR_CONNECT_TIMEOUT / HEADERS_TIMEOUT / BODY_TIMEOUT / SOCKET /
 * ABORTED, node:http's "socket hang up", and fetch's network `TypeError('fetch failed')`. The
 * `cause` chain is searched (fetch and many SDKs wrap the socket error).
 */
export function isOutcomeUnknownError(error: unknown): boolean {
  let current: unknown = error;
  for (let depth = 0; depth < 8 && typeof current === 'object' && current !== null; depth += 1) {
    if (isUnknownOne(current as ErrorLike, depth === 0)) return true;
    current = (current as ErrorLike).cause;
  }
  return false;
}

/**
 * run()'s default classification: `unknown` for the errors of isOutcomeUnknownError (aborts,
 * timeouts, connections lost mid-request), `retryable` for everything else.
 */
export function defaultClassify(error: unknown): Classification {
  return isOutcomeUnknownError(error) ? 'unknown' : 'retryable';
}
