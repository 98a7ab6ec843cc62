// settle.idempotent(): wrap your function once, call it as before; a repeated call replays.
import { z } from 'zod';
import { createSettleClient, IdempotencyConflictError } from '../../src/index.js';

type Refund = { orderId: string; amountCents: number; note: string };

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  let refunds = 0;
  // Your function, unchanged: it asks the payment provider for a refund.
  async function refund(order: Refund, requestedBy: string): Promise<{ refundId: string; amountCents: number }> {
    refunds += 1; // provider.refund(order, { idempotencyKey: `refund-${order.orderId}`, requestedBy })
    return { refundId: `re_${refunds}_${requestedBy}`, amountCents: order.amountCents };
  }
  const refundOnce = settle.idempotent(refund, {
    tenant: 'acme',
    key: (order) => `refund-${order.orderId}`,
    // What makes two calls the same refund: not `note`, whose wording may change on a retry.
    request: (order) => ({ orderId: order.orderId, amountCents: order.amountCents }),
    binding: (_order, requestedBy) => ({ principal: requestedBy, generation: 1 }),
    result: z.object({ refundId: z.string(), amountCents: z.number().int() }), // checked on replay too
  });
  const seen: string[] = [];
  try {
    const order = { orderId: `o-${Date.now()}`, amountCents: 1250, note: 'damaged' };
    const first = await refundOnce(order, 'support'); // runs refund()
    const again = await refundOnce({ ...order, note: 'damaged in transit' }, 'support'); // replays it
    seen.push(first.refundId, again.refundId, `refunds=${refunds}`);
    try {
      await refundOnce({ ...order, amountCents: 9999 }, 'support'); // the same key, another amount
    } catch (error) {
      if (!(error instanceof IdempotencyConflictError)) throw error;
      seen.push(`conflict on ${error.conflictOn.join(',')}`); // refund() did not run
    }
    console.log(seen);
    return seen;
  } finally {
    await settle.end();
  }
}
