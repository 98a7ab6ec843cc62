import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { SettleConnectionError, type TransactionRunInput } from '../../src/index.js';
import {
  binding,
  type ClientTestContext,
  gate,
  setupClientTest,
  someoneWaitsOnLock,
  uniqueKey,
  waitFor,
} from './helpers.js';

let t: ClientTestContext;
beforeAll(async () => {
  t = await setupClientTest('client_tx');
  // The application's own table, written by the effect in the settlement's transaction.
  await t.su.query(`create table ledger (key text primary key, amount numeric not null);
                    grant select, insert on ledger to settle_app`);
});
afterAll(async () => {
  await t?.close();
});

const tenant = 'acme';
const input = (key: string, extra: Partial<TransactionRunInput> = {}): TransactionRunInput => ({
  tenant,
  key,
  request: { amount: '12.30' },
  binding,
  ...extra,
});

async function ledger(key: string): Promise<string[]> {
  const { rows } = await t.su.query<{ amount: string }>('select amount::text from ledger where key = $1', [key]);
  return rows.map((row) => row.amount);
}

const credit =
  (key: string) =>
  async ({
    transaction,
  }: {
    transaction: Parameters<Parameters<typeof t.app.runInTransaction>[1]>[0]['transaction'];
  }) => {
    const amount = await transaction.oneFirst(
      sql.type(
        z.object({ amount: z.string() }),
      )`insert into ledger (key, amount) values (${key}, 12.30) returning amount::text`,
    );
    return { credited: amount };
  };

describe('runInTransaction()', () => {
  it('commits the effect and its settlement together, then replays without re-running', async () => {
    const key = uniqueKey();
    expect(await t.app.runInTransaction(input(key), credit(key))).toEqual({
      outcome: 'completed',
      result: { credited: '12.30' },
      attempt: 1,
      settledBy: 'this_attempt',
    });
    expect(await ledger(key)).toEqual(['12.30']);
    expect(await t.app.runInTransaction(input(key), credit(key))).toEqual({
      outcome: 'replay',
      result: { credited: '12.30' },
      settledAttempt: 1,
    });
    expect(await ledger(key)).toEqual(['12.30']);
  });

  it('a throwing effect rolls its writes back, and the failure is recorded in the same commit', async () => {
    const key = uniqueKey();
    const outcome = await t.app.runInTransaction(input(key), async ({ transaction }) => {
      await transaction.query(sql.unsafe`insert into ledger (key, amount) values (${key}, 1)`);
      throw new Error('downstream refused');
    });
    expect(outcome).toMatchObject({
      outcome: 'failed',
      final: false,
      attempt: 1,
      error: { message: 'downstream refused' },
    });
    expect(await ledger(key)).toEqual([]);
    const record = await t.admin.inspect({ tenant, key });
    expect(record).toMatchObject({ status: 'pending', inFlight: false, attempt: 1 });
    // The next run opens attempt 2 and commits.
    expect(await t.app.runInTransaction(input(key), credit(key))).toMatchObject({ outcome: 'completed', attempt: 2 });
    expect(await ledger(key)).toEqual(['12.30']);
  });

  it('a failing SQL statement in the effect is classified like any error (final here)', async () => {
    const key = uniqueKey();
    await t.su.query('insert into ledger values ($1, 0)', [key]);
    const outcome = await t.app.runInTransaction(input(key, { classify: () => 'final' }), credit(key));
    expect(outcome).toMatchObject({ outcome: 'failed', final: true, error: { code: '23505' } });
    expect(await ledger(key)).toEqual(['0']);
  });

  it('nothing is left behind when the transaction is cut off: the claim rolls back too', async () => {
    const key = uniqueKey();
    const error = await t.app
      .runInTransaction(input(key), async ({ transaction }) => {
        await transaction.query(sql.unsafe`insert into ledger (key, amount) values (${key}, 1)`);
        const pid = await transaction.oneFirst(sql.type(z.object({ pid: z.number() }))`select pg_backend_pid() as pid`);
        await t.su.query('select pg_terminate_backend($1)', [pid]);
        await transaction.query(sql.unsafe`select 1`);
        return 'never';
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SettleConnectionError);
    expect(await ledger(key)).toEqual([]);
    expect(await t.admin.inspect({ tenant, key })).toBeNull();
  });

  it('a concurrent duplicate waits for the commit and then replays', async () => {
    const key = uniqueKey();
    const inside = gate();
    const release = gate();
    const first = t.app.runInTransaction(input(key), async (context) => {
      inside.open();
      await release.promise;
      return credit(key)(context);
    });
    await inside.promise;
    let calls = 0;
    const second = t.client().runInTransaction(input(key), async () => {
      calls += 1;
      return 'never';
    });
    await waitFor(() => someoneWaitsOnLock(t.su));
    release.open();
    expect(await first).toMatchObject({ outcome: 'completed' });
    expect(await second).toMatchObject({ outcome: 'replay', result: { credited: '12.30' } });
    expect(calls).toBe(0);
    expect(await ledger(key)).toEqual(['12.30']);
  });

  it('runs inside the caller transaction, and rolls back with it', async () => {
    const key = uniqueKey();
    const pool = await t.app.getPool();
    const error = await pool
      .transaction(async (tx) => {
        const outcome = await t.app.runInTransaction(input(key), credit(key), { connection: tx });
        expect(outcome).toMatchObject({ outcome: 'completed' });
        throw new Error('caller changes its mind');
      })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ message: 'caller changes its mind' });
    expect(await ledger(key)).toEqual([]);
    expect(await t.admin.inspect({ tenant, key })).toBeNull();
  });

  it('serializable isolation, retried whole on 40001', async () => {
    const key = uniqueKey();
    const events: unknown[] = [];
    const client = t.client({ onRetry: (event) => events.push(event) });
    let runs = 0;
    const outcome = await client.runInTransaction(
      input(key, { isolation: 'serializable' }),
      async ({ transaction }) => {
        runs += 1;
        const seen = await transaction.oneFirst(
          sql.type(z.object({ n: z.number() }))`select count(*)::int as n from ledger where key = ${key}`,
        );
        if (runs === 1) {
          // A concurrent writer commits into what this transaction read: its own insert must fail.
          // Write skew: the other transaction reads what this one will write, and writes what this
          // one read, and commits first. SSI must abort this one (40001).
          await t.su.query('begin isolation level serializable');
          await t.su.query('select count(*) from ledger where key = $1', [`${key}-x1`]);
          await t.su.query('insert into ledger values ($1, 1)', [key]);
          await t.su.query('commit');
        }
        await transaction.query(sql.unsafe`insert into ledger (key, amount) values (${`${key}-x${runs}`}, ${seen})`);
        return { runs };
      },
    );
    expect(outcome).toMatchObject({ outcome: 'completed' });
    expect(runs).toBe(2);
    expect(events).toEqual([expect.objectContaining({ operation: 'runInTransaction', retry: 1 })]);
    expect(await ledger(`${key}-x1`)).toEqual([]);
    expect(await ledger(`${key}-x2`)).toEqual(['1']);
  });
});
