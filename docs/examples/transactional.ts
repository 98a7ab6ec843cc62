// runInTransaction(): the effect is SQL in the same database, so it commits with its settlement.
import { sql } from 'slonik';
import { z } from 'zod';
import { createSettleClient, type RunOutcome } from '../../src/index.js';

export async function main(databaseUrl: string): Promise<{ outcomes: RunOutcome[]; balance: string }> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  try {
    const pool = await settle.getPool();
    await pool.query(sql.unsafe`
      create table if not exists example_ledger (id bigint generated always as identity primary key,
                                                 account text not null, amount numeric not null)`);
    const account = `acct-${Date.now()}`;
    const input = {
      tenant: 'acme',
      key: `deposit-${account}`,
      request: { account, amount: '100.00' },
      binding: { principal: 'teller:bob', generation: 1 },
    };
    const deposit = () =>
      settle.runInTransaction(input, async ({ transaction }) => {
        const id = await transaction.oneFirst(sql.type(z.object({ id: z.bigint() }))`
          insert into example_ledger (account, amount) values (${account}, 100.00) returning id`);
        return { entry: id.toString() }; // bigint is not JSON: convert it
      });
    const outcomes = [await deposit(), await deposit()]; // completed, then replay
    const balance = await pool.oneFirst(sql.type(z.object({ balance: z.string() }))`
      select coalesce(sum(amount), 0)::text as balance from example_ledger where account = ${account}`);
    console.log(outcomes.map((o) => o.outcome), balance); // [ 'completed', 'replay' ] 100.00
    return { outcomes, balance };
  } finally {
    await settle.end();
  }
}
