// runInTransaction(): the effect is SQL in the same database, so the ledger row and the
// settlement commit together, or neither does. Run it: `npx tsx examples/transaction.ts`
// (examples/README.md). In your code the import is 'pg-settle'.
import { sql } from 'slonik';
import { z } from 'zod';
import { createSettleClient } from '../src/index.js';
import { runExample } from './support/throwaway-database.js';

export async function main(urls: { readonly app: string }): Promise<void> {
  // The application's login: granted settle_app, owner of the schema `example` (its own tables).
  const settle = createSettleClient({ connectionString: urls.app });
  try {
    const pool = await settle.getPool();
    await pool.query(sql.unsafe`
      create table example.ledger (id bigint generated always as identity primary key,
                                   account text not null, amount numeric not null)`);
    const balance = (account: string) =>
      pool.oneFirst(sql.type(z.object({ balance: z.string() }))`
        select coalesce(sum(amount), 0)::text as balance from example.ledger where account = ${account}`);
    const binding = { principal: 'teller:bob', generation: 1 };
    const deposit = (key: string, account: string, amount: string, fail = false) =>
      settle.runInTransaction({ tenant: 'acme', key, request: { account, amount }, binding }, async ({ transaction }) => {
        const id = await transaction.oneFirst(sql.type(z.object({ id: z.bigint() }))`
          insert into example.ledger (account, amount) values (${account}, ${amount}) returning id`);
        if (fail) throw new Error('the fraud check said no, after the insert');
        return { entry: id.toString() }; // a bigint is not JSON: convert it
      });

    const first = await deposit('deposit-1', 'acct-1', '100.00');
    console.log(`deposit-1: ${first.outcome}, ledger entry ${first.outcome === 'completed' ? JSON.stringify(first.result) : '-'}`);
    const again = await deposit('deposit-1', 'acct-1', '100.00');
    console.log(`deposit-1 again: ${again.outcome}${again.outcome === 'replay' ? ` of attempt ${again.settledAttempt}: no second ledger row` : ''}`);
    console.log(`acct-1 balance: ${await balance('acct-1')}`);

    const refused = await deposit('deposit-2', 'acct-2', '50.00', true);
    console.log(`deposit-2 (the effect throws after its insert): ${refused.outcome}${refused.outcome === 'failed' ? `, final=${refused.final}` : ''}`);
    console.log(`acct-2 balance: ${await balance('acct-2')} (the insert rolled back with the attempt)`);
  } finally {
    await settle.end();
  }
}

await runExample(import.meta.url, { logins: { app: ['settle_app'] }, schemaOwner: 'app' }, main);
