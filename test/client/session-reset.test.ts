import { sql } from 'slonik';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { binding, type ClientTestContext, setupClientTest, uniqueKey } from './helpers.js';

// The client's own pool skips slonik's DISCARD ALL after the client's own statements only;
// anything else that ran on a connection is reset before the connection is reused.

let t: ClientTestContext;
beforeAll(async () => {
  t = await setupClientTest('client_session_reset');
});
afterAll(async () => {
  await t?.close();
});

const setting = z.object({ value: z.string() });

describe('session reset of the client pool', () => {
  it('session state set through getPool() does not reach the next checkout', async () => {
    const client = t.client({ poolSize: 1 });
    const pool = await client.getPool();
    const before = await pool.oneFirst(sql.type(setting)`select current_setting('statement_timeout') as value`);
    await pool.query(sql.unsafe`set statement_timeout = '1234ms'`);
    await pool.query(sql.unsafe`set application_name = 'leaked'`);
    // Pool of one: this checkout gets the same connection, after its reset.
    expect(await pool.oneFirst(sql.type(setting)`select current_setting('statement_timeout') as value`)).toBe(before);
    expect(await pool.oneFirst(sql.type(setting)`select current_setting('application_name') as value`)).not.toBe('leaked');
  });

  it('session state set inside runInTransaction does not outlive it', async () => {
    const client = t.client({ poolSize: 1 });
    const outcome = await client.runInTransaction({ tenant: 'acme', key: uniqueKey(), request: {}, binding }, async ({ transaction }) => {
      await transaction.query(sql.unsafe`set work_mem = '7MB'`); // not LOCAL: survives the commit
      return 'done';
    });
    expect(outcome).toMatchObject({ outcome: 'completed' });
    const pool = await client.getPool();
    expect(await pool.oneFirst(sql.type(setting)`select current_setting('work_mem') as value`)).not.toBe('7MB');
  });

  it('sends DISCARD ALL only after statements that are not the client\'s own', async (context) => {
    await t.su.query('create extension if not exists pg_stat_statements');
    const discards = async (): Promise<number> => {
      const { rows } = await t.su.query<{ n: number }>(
        `select coalesce(sum(calls), 0)::int as n from pg_stat_statements
          where dbid = (select oid from pg_database where datname = current_database()) and query = 'DISCARD ALL'`,
      );
      return rows[0]?.n ?? 0;
    };
    const loaded = await discards().then(() => true, () => false);
    if (!loaded) context.skip('pg_stat_statements is not in shared_preload_libraries of this server');

    const client = t.client({ poolSize: 1 });
    const ref = { tenant: 'acme', key: uniqueKey() };
    await client.get(ref); // opens the connection
    const start = await discards();
    const claimed = await client.claim({ ...ref, request: {}, binding });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
    await client.heartbeat(claimed.attempt);
    await client.complete(claimed.attempt, 1);
    await client.get(ref);
    expect(await discards()).toBe(start);

    const pool = await client.getPool();
    await pool.query(sql.unsafe`select 1`);
    await client.get(ref); // waits for the release (and reset) of the connection above
    expect(await discards()).toBe(start + 1);
  });
});
