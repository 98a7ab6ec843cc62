// Reconciliation: a payment whose outcome was lost (the provider timed out) is dead-lettered as
// needs_reconciliation; createReconciler() asks the provider what happened under the payment's
// idempotency key and records the verified outcome, so the next call replays it. Run it:
// `npx tsx examples/reconcile.ts` (examples/README.md). In your code the import is 'pg-settle'.
import { createReconciler, createSettleClient } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

/** Stands in for a payment provider: its charges by idempotency key, and a lookup. */
const provider = new Map<string, { id: string; captured: boolean }>();

export async function main(urls: { readonly app: string; readonly reconciler: string }): Promise<void> {
  const settle = createSettleClient({ connectionString: urls.app }); // granted settle_app
  const reconcilerClient = createSettleClient({ connectionString: urls.reconciler }); // granted settle_reconciler
  try {
    const order = {
      tenant: 'acme',
      key: 'order-7',
      request: { amount: '42.00', to: 'acct_3' },
      binding: { principal: 'svc-checkout', generation: 1 },
      maxAttempts: 1, // one attempt: an unknown outcome is dead-lettered at once, for this example
    };
    // The provider charges, but the answer is lost: the effect throws a TimeoutError.
    const lost = await settle.run(order, async () => {
      provider.set('acme/order-7', { id: 'ch_77', captured: true });
      throw Object.assign(new Error('provider did not answer in time'), { name: 'TimeoutError' });
    });
    console.log(`payment: ${lost.outcome}${lost.outcome === 'unknown' ? ` (${lost.reason}): never a failure, the charge may exist` : ''}`);

    const reconciler = createReconciler({
      client: reconcilerClient,
      check: async (op) => {
        const charge = provider.get(`${op.tenant}/${op.key}`);
        if (charge === undefined) return { outcome: 'undecided' };
        return charge.captured
          ? { outcome: 'completed', result: { chargeId: charge.id }, evidence: { provider: charge.id }, reason: 'the provider shows the charge' }
          : { outcome: 'failed', error: { code: 'no_charge' }, reason: 'the provider has no charge' };
      },
    });
    const sweep = await reconciler.sweep(); // one batch; reconciler.start() sweeps until stop()
    for (const op of sweep.operations) console.log(`reconciler: ${op.tenant}/${op.key} ${op.result}`);

    const after = await settle.run(order, async () => {
      throw new Error('never runs: the operation is settled');
    });
    console.log(`payment again: ${after.outcome}${after.outcome === 'replay' ? ` ${JSON.stringify(after.result)}` : ''}`);
  } finally {
    await Promise.all([settle.end(), reconcilerClient.end()]);
  }
}

await runExample(import.meta.url, { logins: { app: ['settle_app'], reconciler: ['settle_reconciler'] } }, main);
