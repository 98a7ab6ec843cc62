// run(): perform a side effect at most once per idempotency key, replay its result afterwards.
import { createSettleClient, type RunOutcome } from '../../src/index.js';

export async function main(databaseUrl: string): Promise<RunOutcome[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  let charges = 0;
  const chargeCard = async (amount: string) => {
    charges += 1; // stands in for a call to a payment provider
    return { chargeId: `ch_${charges}`, amount };
  };

  try {
    const input = {
      tenant: 'acme',
      key: `order-${Date.now()}-42`, // the client's idempotency key
      request: { amount: '19.99', currency: 'EUR', card: 'tok_visa' },
      binding: { principal: 'user:alice', scopes: ['payments:write'], generation: 3 },
    };
    const first = await settle.run(input, async ({ signal }) => {
      signal.throwIfAborted(); // stop early if the lease was lost
      return chargeCard('19.99');
    });
    // A retry of the same request (a client timeout, a redelivered message) replays.
    const retry = await settle.run(input, async () => chargeCard('19.99'));
    console.log(first.outcome, retry.outcome, `charges: ${charges}`); // completed replay charges: 1
    return [first, retry];
  } finally {
    await settle.end();
  }
}
