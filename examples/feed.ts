// The settlement feed: a ledger consumer gets every final outcome exactly once, in a
// commit-safe order, and writes it in the same transaction that acknowledges it. Run it:
// `npx tsx examples/feed.ts` (examples/README.md). In your code the import is 'pg-settle'.
import { sql } from 'slonik';
import { z } from 'zod';
import { createSettleClient, type FeedEvent, type SettleClient } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

/** Consumes `ledger` until `count` events have been handled, then stops (after that batch). */
async function consumeEvents(consumer: SettleClient, count: number): Promise<FeedEvent[]> {
  const seen: FeedEvent[] = [];
  const stop = new AbortController();
  await consumer.consume(
    'ledger',
    async (events, { connection }) => {
      // Transaction mode (the default): these inserts commit with the acknowledgement, or neither does.
      for (const e of events) {
        if (e.status !== 'completed') continue;
        await connection!.query(sql.unsafe`
          insert into example.ledger (event_id, tenant, key, amount)
          values (${e.eventId.toString()}, ${e.tenant}, ${e.key}, ${(e.result as { amount: string }).amount})`);
      }
    },
    {
      signal: stop.signal,
      onBatch: (events) => {
        seen.push(...events);
        if (seen.length >= count) stop.abort();
      },
    },
  );
  return seen;
}

export async function main(urls: { readonly app: string; readonly ledger: string }): Promise<void> {
  const settle = createSettleClient({ connectionString: urls.app }); // granted settle_app
  const consumer = createSettleClient({ connectionString: urls.ledger }); // granted settle_consumer, owns schema example
  try {
    await (await consumer.getPool()).query(sql.unsafe`
      create table example.ledger (event_id bigint primary key, tenant text not null, key text not null, amount numeric not null)`);
    const binding = { principal: 'svc-payouts', generation: 1 };
    const pay = (key: string, amount: string, fail = false) =>
      settle.run({ tenant: 'acme', key, request: { amount }, binding, maxAttempts: 1 }, async () => {
        if (fail) throw new Error('account closed');
        return { amount, payoutId: `po_${key}` };
      });
    await pay('payout-1', '10.00');
    await pay('payout-2', '25.50');
    await pay('payout-3', '99.99', true); // a failure is a final outcome too: one event
    await pay('payout-1', '10.00'); // a replay changes nothing: no event

    const first = await consumeEvents(consumer, 3);
    for (const e of first) console.log(`event ${e.eventId}: ${e.key} ${e.status}${e.status === 'completed' ? ` ${JSON.stringify(e.result)}` : ` ${JSON.stringify(e.error)}`}`);

    await pay('payout-4', '1.00');
    const second = await consumeEvents(consumer, 1); // starts after the acknowledged events
    console.log(`next consume: ${second.map((e) => e.key).join(', ')} (the first three are not delivered again)`);

    const pool = await consumer.getPool();
    const ledger = await pool.one(sql.type(z.object({ rows: z.number(), total: z.string() }))`
      select count(*)::int as rows, coalesce(sum(amount), 0)::text as total from example.ledger`);
    console.log(`ledger: ${ledger.rows} rows, total ${ledger.total}`);
  } finally {
    await Promise.all([settle.end(), consumer.end()]);
  }
}

await runExample(
  import.meta.url,
  {
    logins: { app: ['settle_app'], ledger: ['settle_consumer'] },
    schemaOwner: 'ledger',
    adminStatements: ["select settle.register_consumer(name => 'ledger')"], // registered before the payments: it sees them all
  },
  main,
);
