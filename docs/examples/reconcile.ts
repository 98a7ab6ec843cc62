// run() with a timeout: the charge may have happened, so the retry reconciles before it charges.
import { z } from 'zod';
import { createSettleClient, type RunOutcome } from '../../src/index.js';

const Charge = z.object({ chargeId: z.string(), amountCents: z.number().int() });
type Charge = z.infer<typeof Charge>;

export async function main(databaseUrl: string): Promise<RunOutcome<Charge>[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  // A payment provider that honours idempotency keys and can be asked what it did under one.
  const provider = new Map<string, Charge>();
  let calls = 0;
  const charge = async (idempotencyKey: string, firstCallTimesOut: boolean): Promise<Charge> => {
    calls += 1;
    const done = provider.get(idempotencyKey) ?? { chargeId: `ch_${provider.size + 1}`, amountCents: 1999 };
    provider.set(idempotencyKey, done);
    if (firstCallTimesOut && calls === 1) throw new DOMException('The operation timed out.', 'TimeoutError');
    return done;
  };

  try {
    const key = `order-${Date.now()}-7`;
    const input = {
      tenant: 'acme',
      key,
      request: { amountCents: 1999, currency: 'EUR' },
      binding: { principal: 'svc-checkout', scopes: ['payments:write'], generation: 1 },
    };
    const options = {
      result: Charge, // validates the result (and any replay) and types outcome.result
      // Asked before the effect whenever an earlier attempt may already have charged.
      reconcile: async () => provider.get(`acme/${key}`),
    };
    // Attempt 1 charges, but the answer times out: unknown, never failed.
    const first = await settle.run(input, async ({ signal }) => charge(`acme/${key}`, !signal.aborted), options);
    // Attempt 2 reconciles: the provider has the charge, so it settles without charging again.
    const second = await settle.run(input, async () => charge(`acme/${key}`, false), options);
    if (second.outcome === 'completed') console.log(second.result.chargeId, second.reconciled); // ch_1 true
    console.log(first.outcome, second.outcome, `provider calls: ${calls}`); // unknown completed provider calls: 1
    return [first, second];
  } finally {
    await settle.end();
  }
}
