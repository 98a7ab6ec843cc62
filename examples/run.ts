// The client's run(): one payment under an idempotency key, retried, changed, and a provider
// that fails once. Run it: `npx tsx examples/run.ts` (examples/README.md). In your code the
// import is 'pg-settle'.
import { createSettleClient, type RunOutcome } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

/** Stands in for a payment provider that honours its own idempotency key (as Stripe's API does). */
const charges = new Map<string, string>();
let outages = 1; // the provider's first call fails with a 503

async function charge(idempotencyKey: string, amount: string): Promise<{ chargeId: string; amount: string }> {
  if (outages > 0) {
    outages -= 1;
    throw Object.assign(new Error('provider answered 503'), { status: 503 });
  }
  const chargeId = charges.get(idempotencyKey) ?? `ch_${charges.size + 1}`;
  charges.set(idempotencyKey, chargeId);
  return { chargeId, amount };
}

/** One line per outcome (RunOutcome is a union discriminated by `outcome`). */
function describe(outcome: RunOutcome): string {
  switch (outcome.outcome) {
    case 'completed':
      return `completed by attempt ${outcome.attempt}: ${JSON.stringify(outcome.result)}`;
    case 'replay':
      return `replay of attempt ${outcome.settledAttempt}: ${JSON.stringify(outcome.result)} (the effect did not run)`;
    case 'conflict':
      return `conflict on ${outcome.conflictOn.join(',')} (nothing ran)`;
    case 'failed':
      return `failed: ${JSON.stringify(outcome.error)}, final=${outcome.final} (a later call may try again unless final)`;
    default:
      return `${outcome.outcome}: ${JSON.stringify(outcome)}`;
  }
}

export async function main(urls: { readonly app: string }): Promise<void> {
  // The application's login, granted settle_app only.
  const settle = createSettleClient({ connectionString: urls.app });
  try {
    const request = { amount: '19.99', currency: 'EUR', to: 'acct_9' };
    const binding = { principal: 'svc-checkout', scopes: ['payments:write'], generation: 1 };
    const order = { tenant: 'acme', key: 'order-42', request, binding };
    // The same downstream key for every attempt: a retry after a lost answer cannot charge twice.
    const pay = () => settle.run(order, async () => charge('acme/order-42', '19.99'));

    console.log(`1. first call (the provider is down): ${describe(await pay())}`);
    console.log(`2. second call: ${describe(await pay())}`);
    console.log(`3. a retry: ${describe(await pay())}`);
    const changed = { ...order, request: { ...request, amount: '20.00' } };
    console.log(`4. another amount under the same key: ${describe(await settle.run(changed, async () => charge('x', '20.00')))}`);
    const stranger = { ...order, binding: { ...binding, principal: 'svc-other' } };
    console.log(`5. the same key from another caller: ${describe(await settle.run(stranger, async () => charge('y', '19.99')))}`);
    console.log(`the provider charged ${charges.size} time(s)`);
  } finally {
    await settle.end();
  }
}

await runExample(import.meta.url, { logins: { app: ['settle_app'] } }, main);
