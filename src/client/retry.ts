import { isRetryable, mapDatabaseError } from './errors.js';
import type { RetryEvent, RetryPolicy } from './types.js';

export interface ResolvedRetryPolicy {
  readonly maxRetries: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly onRetry?: ((event: RetryEvent) => void) | undefined;
}

export function resolveRetryPolicy(
  policy: RetryPolicy = {},
  onRetry?: (event: RetryEvent) => void,
): ResolvedRetryPolicy {
  return {
    maxRetries: policy.maxRetries ?? 5,
    baseDelayMs: policy.baseDelayMs ?? 20,
    maxDelayMs: policy.maxDelayMs ?? 1_000,
    onRetry,
  };
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Full-jitter exponential backoff: a random delay in [0, min(cap, base * 2^(retry-1))]. */
export function backoffDelay(retry: number, baseDelayMs: number, maxDelayMs: number): number {
  const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, retry - 1));
  return Math.round(Math.random() * ceiling);
}

/**
 * Runs `fn`, mapping any error with mapDatabaseError, and retries transient conflicts (40001,
 * 40P01, 55P03) with bounded, jittered backoff — unless `retryable` is false (inside a caller's
 * transaction a retry is impossible: the transaction is aborted and must be retried whole).
 */
export async function withRetry<T>(
  operation: string,
  policy: ResolvedRetryPolicy,
  retryable: boolean,
  fn: () => Promise<T>,
): Promise<T> {
  for (let retry = 1; ; retry += 1) {
    try {
      return await fn();
    } catch (raw) {
      const error = mapDatabaseError(raw);
      if (!retryable || !isRetryable(error) || retry > policy.maxRetries) throw error;
      const delayMs = backoffDelay(retry, policy.baseDelayMs, policy.maxDelayMs);
      policy.onRetry?.({ operation, retry, delayMs, error });
      await sleep(delayMs);
    }
  }
}
