// Reconciliation: a payment whose outcome was lost is dead-lettered as needs_reconciliation;
// createReconciler() asks the provider what happened under the payment's idempotency key and
// records a verdict for each answer the provider can give, so the next call replays it:
//   the provider has a captured charge      -> completed (its result)
//   it has the charge, declined             -> failed (its error)
//   it has the charge, still processing     -> undecided (asked again later)
//   it has no record of the key at all      -> failed (not_attempted): nothing happened, and a
//                                              new attempt needs a new key
//   it cannot answer (an error, a timeout)  -> the check throws: asked again later
// Run it: `npx tsx examples/reconcile.ts` (examples/README.md). In your code the import is 'pg-settle'.
import { createReconciler, createSettleClient, type ReconcileDecision } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

type Charge = { readonly id: string; readonly status: 'captured' | 'declined' | 'processing' };

/** Stands in for a payment provider that honours idempotency keys: its charges by key, and a lookup. */
const provider = new Map<string, Charge>();

/** The verdict for each answer of the provider's lookup by idempotency key. */
export function verdict(charge: Charge | undefined): ReconcileDecision {
  if (charge === undefined) {
    // No record of the key: the call never reached the provider (a worker killed before it
    // called, a request that timed out before it was sent). Nothing happened, so the operation
    // failed; every retry of this key gets the failure, and a new attempt needs a new key. Only
    // where the lookup is authoritative: no request under the key can still arrive.
    return {
      outcome: 'failed',
      error: { code: 'not_attempted' },
      evidence: { provider: 'no charge under the key' },
      reason: 'the provider has no record of the key',
    };
  }
  switch (charge.status) {
    case 'captured':
      return {
        outcome: 'completed',
        result: { chargeId: charge.id },
        evidence: { provider: charge.id },
        reason: 'the provider shows the charge',
      };
    case 'declined':
      return {
        outcome: 'failed',
        error: { code: 'declined', chargeId: charge.id },
        evidence: { provider: charge.id },
        reason: 'the provider declined the charge',
      };
    case 'processing':
      return { outcome: 'undecided' };
  }
}

export async function main(urls: { readonly app: string; readonly reconciler: string }): Promise<void> {
  const settle = createSettleClient({ connectionString: urls.app }); // granted settle_app
  const reconcilerClient = createSettleClient({ connectionString: urls.reconciler }); // granted settle_reconciler
  try {
    const order = (key: string) => ({
      tenant: 'acme',
      key,
      request: { amount: '42.00', to: 'acct_3' },
      binding: { principal: 'svc-checkout', generation: 1 },
      maxAttempts: 1, // one attempt: an unknown outcome is dead-lettered at once, for this example
    });
    const timeout = () => Object.assign(new Error('provider did not answer in time'), { name: 'TimeoutError' });
    // order-7: the provider charges, but the answer is lost: the effect throws a TimeoutError.
    const lost = await settle.run(order('order-7'), async () => {
      provider.set('acme/order-7', { id: 'ch_77', status: 'captured' });
      throw timeout();
    });
    console.log(
      `order-7: ${lost.outcome}${lost.outcome === 'unknown' ? ` (${lost.reason}): never a failure, the charge may exist` : ''}`,
    );
    // order-8: the request times out before it reaches the provider: unknown too, as the
    // client cannot tell the two apart.
    const unsent = await settle.run(order('order-8'), async () => {
      throw timeout();
    });
    console.log(`order-8: ${unsent.outcome}`);

    const reconciler = createReconciler({
      client: reconcilerClient,
      check: async (op) => verdict(provider.get(`${op.tenant}/${op.key}`)),
    });
    const sweep = await reconciler.sweep(); // one batch; reconciler.start() sweeps until stop()
    for (const op of [...sweep.operations].sort((a, b) => a.key.localeCompare(b.key)))
      console.log(`reconciler: ${op.tenant}/${op.key} ${op.result}`);

    const again = await settle.run(order('order-7'), async () => {
      throw new Error('never runs: the operation is settled');
    });
    console.log(
      `order-7 again: ${again.outcome}${again.outcome === 'replay' ? ` ${JSON.stringify(again.result)}` : ''}`,
    );
    const refused = await settle.run(order('order-8'), async () => {
      throw new Error('never runs: the operation failed for good');
    });
    console.log(
      `order-8 again: ${refused.outcome}${refused.outcome === 'failed' ? ` ${JSON.stringify(refused.error)}` : ''}`,
    );
    // Nothing happened under order-8: the payment is tried again under a new key.
    const retried = await settle.run(order('order-8-2'), async () => {
      provider.set('acme/order-8-2', { id: 'ch_82', status: 'captured' });
      return { chargeId: 'ch_82' };
    });
    console.log(
      `order-8-2 (a new key): ${retried.outcome}${retried.outcome === 'completed' ? ` ${JSON.stringify(retried.result)}` : ''}`,
    );
  } finally {
    await Promise.all([settle.end(), reconcilerClient.end()]);
  }
}

await runExample(import.meta.url, { logins: { app: ['settle_app'], reconciler: ['settle_reconciler'] } }, main);
