import {
  createReconciler,
  type ReconcileCandidate,
  type ReconcileDecision,
  type ReconcileResult,
} from '../client/reconcile.js';
import type { SettleClient } from '../client/types.js';
import { keyOf } from '../checker/invariants.js';
import type { Ledger } from './ledger.js';

/**
 * The application's reconciler (createReconciler, docs/operations.md "Needs reconciliation"),
 * as a payment service runs it: it leases the operations whose budget is spent while an attempt
 * may have paid (dead-lettered needs_reconciliation), asks the payout ledger (the provider, the
 * source of truth of whether money moved) and resolves each one: completed with the payout it
 * finds, failed when the provider has no payout under the key. A lookup that times out leaves
 * the operation undecided; it is leased again shortly after.
 */
export interface SimReconciler {
  /** Resolves once the reconciler has decided (tenant, key), or once it stops. */
  reconciled(tenant: string, key: string): Promise<void>;
  stop(): Promise<void>;
  readonly stats: { sweeps: number; leased: number; results: Record<ReconcileResult, number> };
}

export function startSimReconciler(o: {
  readonly client: SettleClient;
  /** The run's tenants start with it; any other operation is released at once, unchecked. */
  readonly tenantPrefix: string;
  readonly ledger: Ledger;
  /** The provider's first lookup of this operation times out (provider-outage, paid-slow-lookup). */
  readonly slowFirstLookup: (tenant: string, key: string) => boolean;
  readonly onError: (error: unknown) => void;
}): SimReconciler {
  const stats = {
    sweeps: 0,
    leased: 0,
    results: {
      resolved_completed: 0,
      resolved_failed: 0,
      already_final: 0,
      undecided: 0,
      check_timeout: 0,
      check_error: 0,
      refused: 0,
    },
  };
  const waiting = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  const waiter = (k: string) => {
    let entry = waiting.get(k);
    if (entry === undefined) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      waiting.set(k, (entry = { promise, resolve }));
    }
    return entry;
  };

  const check = async (
    op: ReconcileCandidate,
    { signal }: { readonly signal: AbortSignal },
  ): Promise<ReconcileDecision> => {
    // settle.lease_reconciliation leases whatever needs reconciliation in the database: in a
    // database the user named (--write-to-database) that may be their own operations, which
    // this ledger knows nothing about. Leave them as they were, for their own reconciler.
    if (!op.tenant.startsWith(o.tenantPrefix)) return { outcome: 'undecided', retryAfterMs: 0 };
    if (op.checks === 1 && o.slowFirstLookup(op.tenant, op.key)) {
      // The provider is still slow: the lookup hangs until the reconciler's check timeout.
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
      throw signal.reason;
    }
    const payout = await o.ledger.lookup(op.tenant, op.key);
    if (payout !== null) {
      return {
        outcome: 'completed',
        result: {
          payout_id: payout.payoutId,
          amount_cents: payout.amountCents,
          credited_by_attempt: payout.creditedByAttempt,
        },
        evidence: { provider_payout_id: payout.payoutId },
        reason: 'the provider has the payout',
      };
    }
    return {
      outcome: 'failed',
      error: { code: 'not_paid', message: 'the provider has no payout under this key' },
      evidence: { provider_lookup: 'no payout under the key' },
      reason: 'the provider has no payout',
    };
  };

  const reconciler = createReconciler({
    client: o.client,
    check,
    holder: 'pg-settle-simulate',
    batchSize: 50,
    leaseMs: 10_000,
    checkTimeoutMs: 300,
    retryAfterMs: 100,
    telemetry: false,
    onError: (error) => o.onError(error),
  });

  let stopped = false;
  let wake: (() => void) | undefined;
  const loop = (async () => {
    while (!stopped) {
      try {
        const summary = await reconciler.sweep();
        stats.sweeps += 1;
        stats.leased += summary.leased;
        let foreign = 0;
        for (const { tenant, key, result } of summary.operations) {
          if (!tenant.startsWith(o.tenantPrefix)) {
            foreign += 1;
            continue;
          }
          stats.results[result] += 1;
          if (result === 'resolved_completed' || result === 'resolved_failed' || result === 'already_final')
            waiter(keyOf({ tenant, key })).resolve();
        }
        if (summary.leased > foreign) continue;
      } catch (error) {
        o.onError(error);
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 100);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  })();

  return {
    stats,
    reconciled: (tenant, key) => waiter(keyOf({ tenant, key })).promise,
    async stop() {
      stopped = true;
      wake?.();
      await loop;
      await reconciler.stop();
      for (const entry of waiting.values()) entry.resolve();
    },
  };
}
