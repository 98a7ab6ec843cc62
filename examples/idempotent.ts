// settle.idempotent(): wrap a function once and call it as before. Repeated and concurrent calls
// with the same arguments run it once; a changed request is refused with a typed error; a
// failure lets the next call run it again. Run it: `npx tsx examples/idempotent.ts`
// (examples/README.md). In your code the import is 'pg-settle'.
import { z } from 'zod';
import { createSettleClient, IdempotencyConflictError, OperationFailedError } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

type Transfer = { readonly id: string; readonly amountCents: number; readonly to: string };

/** Your function, unchanged: it asks the bank for a transfer (tr-2's first call hits an outage). */
let bankCalls = 0;
const outages = new Set(['tr-2']);
async function sendTransfer(transfer: Transfer, requestedBy: string): Promise<{ transferId: string; amountCents: number }> {
  bankCalls += 1;
  if (outages.delete(transfer.id)) throw new Error('bank unavailable');
  return { transferId: `bank-${transfer.id}-${requestedBy}`, amountCents: transfer.amountCents };
}

export async function main(urls: { readonly app: string }): Promise<void> {
  const settle = createSettleClient({ connectionString: urls.app }); // granted settle_app
  try {
    const sendOnce = settle.idempotent(sendTransfer, {
      tenant: 'acme',
      key: (transfer) => transfer.id,
      request: (transfer) => ({ amountCents: transfer.amountCents, to: transfer.to }),
      binding: (_transfer, requestedBy) => ({ principal: requestedBy, generation: 1 }),
      result: z.object({ transferId: z.string(), amountCents: z.number().int() }),
    });
    const transfer = { id: 'tr-1', amountCents: 5000, to: 'acct_1' };

    const first = await sendOnce(transfer, 'alice');
    console.log(`first call: ${first.transferId} (bank calls: ${bankCalls})`);
    const again = await sendOnce(transfer, 'alice');
    console.log(`same call again: ${again.transferId}, replayed (bank calls: ${bankCalls})`);

    // Five concurrent calls of a new transfer: one runs, the others wait for its result.
    const racing = await Promise.all(Array.from({ length: 5 }, () => sendOnce({ id: 'tr-3', amountCents: 700, to: 'acct_3' }, 'alice')));
    console.log(`5 concurrent calls: ${new Set(racing.map((r) => r.transferId)).size} distinct result (bank calls: ${bankCalls})`);

    try {
      await sendOnce({ ...transfer, amountCents: 9999 }, 'alice');
    } catch (error) {
      if (!(error instanceof IdempotencyConflictError)) throw error;
      console.log(`another amount under tr-1: ${error.name}, conflict on ${error.conflictOn.join(',')} (bank calls: ${bankCalls})`);
    }

    const second = { id: 'tr-2', amountCents: 1200, to: 'acct_2' };
    try {
      await sendOnce(second, 'bob');
    } catch (error) {
      if (!(error instanceof OperationFailedError)) throw error;
      console.log(`tr-2: ${error.name} (${(error.cause as Error).message}), final=${error.final}`);
    }
    const retried = await sendOnce(second, 'bob');
    console.log(`tr-2 retried: ${retried.transferId} (bank calls: ${bankCalls})`);
  } finally {
    await settle.end();
  }
}

await runExample(import.meta.url, { logins: { app: ['settle_app'] } }, main);
