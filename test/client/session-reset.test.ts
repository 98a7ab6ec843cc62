import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { binding, useClientTest, uniqueKey } from './helpers.js';

// The client's own pool skips the session reset after the client's own statements only;
// anything else that ran on a connection is reset before the connection is reused. The reset
// is DISCARD ALL minus DEALLOCATE ALL and DISCARD PLANS: the client's own statements run as
// named prepared statements, which must survive it.

const t = useClientTest('client_session_reset');

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
    expect(await pool.oneFirst(sql.type(setting)`select current_setting('application_name') as value`)).not.toBe(
      'leaked',
    );
  });

  it('session state set inside runInTransaction does not outlive it', async () => {
    const client = t.client({ poolSize: 1 });
    const outcome = await client.runInTransaction(
      { tenant: 'acme', key: uniqueKey(), request: {}, binding },
      async ({ transaction }) => {
        await transaction.query(sql.unsafe`set work_mem = '7MB'`); // not LOCAL: survives the commit
        return 'done';
      },
    );
    expect(outcome).toMatchObject({ outcome: 'completed' });
    const pool = await client.getPool();
    expect(await pool.oneFirst(sql.type(setting)`select current_setting('work_mem') as value`)).not.toBe('7MB');
  });

  it('resets role, cursors, LISTEN, advisory locks and temporary tables too', async () => {
    const client = t.client({ poolSize: 1 });
    const pool = await client.getPool();
    const state = sql.type(
      z.object({ role: z.string(), cursors: z.number(), channels: z.number(), locks: z.number(), temps: z.number() }),
    )`
      select current_user::text as role,
             (select count(*)::int from pg_cursors) as cursors,
             (select count(*)::int from pg_listening_channels()) as channels,
             (select count(*)::int from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()) as locks,
             (select count(*)::int from pg_class where relpersistence = 't' and relname = 'leak') as temps`;
    const clean = await pool.one(state);
    await pool.connect(async (connection) => {
      await connection.query(sql.unsafe`create temporary table leak (x int)`);
      await connection.query(sql.unsafe`listen leak`);
      await connection.query(sql.unsafe`select pg_advisory_lock(4242)`);
      await connection.query(sql.unsafe`declare leak cursor with hold for select 1`);
      await connection.query(sql.unsafe`set role settle_readonly`);
    });
    // Pool of one: the same connection, after its reset.
    expect(await pool.one(state)).toEqual(clean);
    expect(clean).toMatchObject({ role: 'settle_app', cursors: 0, channels: 0, locks: 0, temps: 0 });
  });

  it('a transaction left open by a borrower never reaches the next checkout', async () => {
    const client = t.client({ poolSize: 1 });
    const pool = await client.getPool();
    const inTransaction = sql.type(z.object({ open: z.boolean(), pid: z.number() }))`
      select now() <> statement_timestamp() as open, pg_backend_pid() as pid`;
    const before = await pool.one(inTransaction);
    expect(before.open).toBe(false);
    // The handler begins a transaction and returns without ending it; the reset refuses to run
    // inside it, so slonik closes that connection instead of handing it on.
    await pool
      .connect(async (connection) => {
        await connection.query(sql.unsafe`begin`);
        await connection.query(sql.unsafe`create temporary table left_open (x int)`);
      })
      .catch(() => {});
    const after = await pool.one(inTransaction);
    expect(after.open).toBe(false);
    expect(after.pid).not.toBe(before.pid);
    const ref = { tenant: 'acme', key: uniqueKey() };
    expect(await client.claim({ ...ref, request: {}, binding })).toMatchObject({ outcome: 'acquired' });
  });

  it("runs the client's own statements as prepared statements that survive the reset", async () => {
    const prepared = sql.type(z.object({ n: z.number() }))`
      select count(*)::int as n from pg_prepared_statements where name like 'pg\_settle\_%'`;
    const client = t.client({ poolSize: 1 });
    const pool = await client.getPool();
    const ref = { tenant: 'acme', key: uniqueKey() };
    expect(await client.claim({ ...ref, request: { n: 1 }, binding })).toMatchObject({ outcome: 'acquired' });
    await client.get({ ...ref, request: { n: 1 }, binding });
    expect((await pool.one(prepared)).n).toBe(2); // claim and get; this query was reset after it
    // A transaction and a foreign statement each reset the connection; the client's statements
    // still run (a dropped statement node-pg believed parsed would fail with 26000).
    const outcome = await client.runInTransaction(
      { tenant: 'acme', key: uniqueKey(), request: {}, binding },
      async () => 'ok',
    );
    expect(outcome).toMatchObject({ outcome: 'completed' });
    await pool.query(sql.unsafe`set work_mem = '7MB'`);
    expect(await client.claim({ ...ref, request: { n: 1 }, binding })).toMatchObject({ outcome: 'in_progress' });
    expect(await client.get({ ...ref, request: { n: 1 }, binding })).toMatchObject({
      outcome: 'found',
      status: 'running',
    });
    expect((await pool.one(prepared)).n).toBeGreaterThanOrEqual(2);

    const unprepared = t.client({ poolSize: 1, preparedStatements: false });
    await unprepared.get({ ...ref, request: { n: 1 }, binding });
    expect((await (await unprepared.getPool()).one(prepared)).n).toBe(0);
  });

  it("sends the reset only after statements that are not the client's own", async (context) => {
    await t.su.query('create extension if not exists pg_stat_statements');
    const discards = async (): Promise<number> => {
      const { rows } = await t.su.query<{ n: number }>(
        `select coalesce(sum(calls), 0)::int as n from pg_stat_statements
          where dbid = (select oid from pg_database where datname = current_database()) and query like 'DO $reset$%'`,
      );
      return rows[0]?.n ?? 0;
    };
    const loaded = await discards().then(
      () => true,
      () => false,
    );
    if (!loaded) context.skip('pg_stat_statements is not in shared_preload_libraries of this server');

    const client = t.client({ poolSize: 1 });
    const ref = { tenant: 'acme', key: uniqueKey() };
    await client.get({ ...ref, request: {}, binding }); // opens the connection
    const start = await discards();
    const claimed = await client.claim({ ...ref, request: {}, binding });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
    await client.heartbeat(claimed.attempt);
    await client.complete(claimed.attempt, 1);
    await client.get({ ...ref, request: {}, binding });
    expect(await discards()).toBe(start);

    const pool = await client.getPool();
    await pool.query(sql.unsafe`select 1`);
    await client.get({ ...ref, request: {}, binding }); // waits for the release (and reset) of the connection above
    expect(await discards()).toBe(start + 1);
  });
});
