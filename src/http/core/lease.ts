import type { SettleClient } from '../../client/client.js';
import { LazyAbortController } from '../../client/lazy-abort.js';
import { LeaseLostError } from '../../client/errors.js';
import type { AttemptHandle } from '../../client/types.js';

export interface LeaseKeeper {
  /** Made when first read (most handlers never read it), aborted as an eager one would be. */
  readonly signal: AbortSignal;
  /** Stops renewing and waits for a renewal in flight. */
  stop(): Promise<void>;
}

/**
 * Renews the lease every `intervalMs` while the handler works. The signal aborts (reason:
 * LeaseLostError) when a renewal is fenced, or when renewals kept failing until the lease's local
 * deadline passed: from then on another request may take the key over.
 */
export function keepLease(
  settle: SettleClient,
  handle: AttemptHandle,
  leaseMs: number,
  intervalMs: number,
  claimedAt: number,
): LeaseKeeper {
  const controller = new LazyAbortController();
  let deadline = claimedAt + leaseMs;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inflight: Promise<void> = Promise.resolve();

  const beat = async (): Promise<void> => {
    const startedAt = Date.now();
    try {
      const outcome = await settle.heartbeat(handle, { leaseMs });
      if (outcome.outcome === 'fenced') {
        stopped = true;
        controller.abort(new LeaseLostError(outcome.reason));
      } else {
        deadline = startedAt + leaseMs;
      }
    } catch (error) {
      if (Date.now() >= deadline) controller.abort(new LeaseLostError('lease_expired', error));
    }
  };
  const schedule = (): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      inflight = beat().finally(schedule);
    }, intervalMs);
    timer.unref();
  };
  schedule();
  return {
    get signal() {
      return controller.signal;
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await inflight;
    },
  };
}
