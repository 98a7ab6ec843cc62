import { createSettleClient, type RunOutcome } from 'pg-settle';

// One payment, run twice under the same idempotency key: the second call replays the first
// call's result and never runs the effect. DATABASE_URL points at a migrated database
// (`npx pg-settle migrate`), as a role granted settle_app.
const databaseUrl = process.env.DATABASE_URL;
if (databaseUrl === undefined) throw new Error('set DATABASE_URL');

const settle = createSettleClient({ connectionString: databaseUrl });
const order = {
  tenant: 'acme',
  key: 'order-42',
  request: { amountCents: 1250, currency: 'EUR', to: 'acct_9' },
  binding: { principal: 'svc-checkout', scopes: ['payments:write'], generation: 1 },
};

let charges = 0;
const charge = async () => {
  charges += 1; // your payment provider's call, with idempotency key 'acme/order-42'
  return { chargeId: `ch_${charges}`, amountCents: 1250 };
};

const first: RunOutcome = await settle.run(order, charge);
const second: RunOutcome = await settle.run(order, charge);
console.log(JSON.stringify({ first: first.outcome, second: second.outcome, charges }));
await settle.end();
