import type pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { newOperation, TENANT } from './support/fixtures.js';
import { storedOperation } from './support/inspect.js';
import { acquire, complete } from './support/settle.js';

// The effect and its settlement commit or roll back together when both live in one database.
const db = useEngineDatabase('same_transaction');

beforeAll(async () => {
  const admin = await db.connect();
  await admin.query(`create table public.ledger (key text primary key, amount numeric not null)`);
  await admin.query('grant select, insert on public.ledger to settle_app');
  await admin.end();
});

/** In one transaction of settle_app: claim, insert the ledger row, complete; then `end`. */
async function settleWithLedgerRow(app: pg.ClientBase, prefix: string, end: 'commit' | 'rollback'): Promise<string> {
  const op = newOperation(prefix);
  const key = op.key as string;
  await app.query('begin');
  const ticket = await acquire(app, op);
  await app.query('insert into public.ledger (key, amount) values ($1, 10.00)', [key]);
  expect(await complete(app, ticket, { ledger: key })).toMatchObject({ outcome: 'settled', status: 'completed' });
  await app.query(end);
  return key;
}

async function ledgerRows(admin: pg.ClientBase, key: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>('select count(*)::int as n from public.ledger where key = $1', [
    key,
  ]);
  return rows[0]?.n ?? 0;
}

describe('claim, effect and complete in one transaction', () => {
  it('ROLLBACK leaves nothing: no operation, no attempt, no audit row, no ledger row', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const key = await settleWithLedgerRow(app, 'rollback', 'rollback');
    expect(await storedOperation(admin, TENANT, key)).toBeUndefined();
    expect(await ledgerRows(admin, key)).toBe(0);
    const { rows } = await admin.query<{ n: number }>(
      `select (select count(*) from settle.attempts where key = $1)
            + (select count(*) from settle_private.audit_log where key = $1) as n`,
      [key],
    );
    expect(Number(rows[0]?.n)).toBe(0);
  });

  it('COMMIT leaves both the settled operation and the ledger row', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const key = await settleWithLedgerRow(app, 'commit', 'commit');
    expect(await storedOperation(admin, TENANT, key)).toMatchObject({ status: 'completed', result: { ledger: key } });
    expect(await ledgerRows(admin, key)).toBe(1);
  });
});
