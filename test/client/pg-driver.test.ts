import { createHash } from 'node:crypto';
import pg from 'pg';
import {
  createPool,
  type DatabasePool,
  type DriverFactory,
  type Interceptor,
  sql,
  UniqueIntegrityConstraintViolationError,
} from 'slonik';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { settleTypeParsers } from '../../src/client/interceptors.js';
import { createSettleDriverFactory } from '../../src/client/pg-driver.js';
import { asRole, binding, useClientTest, uniqueKey } from './helpers.js';

// The client's pool driver (src/client/pg-driver.ts) describes a named statement once per
// connection and then sends Bind/Execute/Sync only, reusing what node-pg built from the first
// RowDescription. What must hold: the rows are exactly what slonik's own driver returns, every
// execution after the first on a connection skips Describe, an error forgets the description,
// a statement whose result type changed fails as it does with slonik's driver (never rows read
// with a stale description), and everything else (unnamed queries, streams, typed errors) is
// slonik's driver's behaviour.

const t = useClientTest('client_pg_driver');

// Counts the Describe messages node-pg sends (every client of this process), per test.
const connectionPrototype = pg.Connection.prototype as unknown as { describe(message: unknown): void };
const originalDescribe = connectionPrototype.describe;
let describes = 0;
beforeEach(() => {
  describes = 0;
  connectionPrototype.describe = function describe(this: unknown, message: unknown) {
    describes += 1;
    originalDescribe.call(this, message);
  };
});
afterEach(() => {
  connectionPrototype.describe = originalDescribe;
});

/** Every query on the pool runs as a named prepared statement, named by its text (as the client's interceptor does). */
const nameEveryQuery: Interceptor = {
  name: 'test/name-every-query',
  transformQuery: (_context, query) => ({
    ...query,
    name: `t_${createHash('sha256').update(query.sql).digest('hex').slice(0, 20)}`,
  }),
};

const pools: DatabasePool[] = [];
afterAll(async () => {
  await Promise.allSettled(pools.map((pool) => pool.end()));
});
async function openPool(driverFactory: DriverFactory | undefined, size = 1, named = true): Promise<DatabasePool> {
  const pool = await createPool(asRole(t.db.url, 'settle_app'), {
    maxPoolSize: size,
    typeParsers: settleTypeParsers(),
    interceptors: named ? [nameEveryQuery] : [],
    resetConnection: async () => {},
    ...(driverFactory === undefined ? {} : { driverFactory }),
  });
  pools.push(pool);
  return pool;
}

const mixedRow = z.object({
  n: z.bigint(),
  at: z.date(),
  nothing: z.null(),
  doc: z.unknown(),
  tags: z.array(z.string()),
  amount: z.string(),
});
const mixed = (n: number) => sql.type(mixedRow)`
  select ${n}::int8 as n, timestamptz '2026-01-02 03:04:05.678+00' + make_interval(secs => ${n}) as at, null::text as nothing,
         jsonb_build_object('n', ${n}::int) as doc, array['a', 'b,c', null]::text[] as tags, ${`${n}.10`}::numeric as amount`;

describe('the client pool driver (named statements described once per connection)', () => {
  it("returns exactly the rows and fields of slonik's own driver, describing once per connection", async () => {
    const ours = await openPool(createSettleDriverFactory());
    const theirs = await openPool(undefined);
    await ours.query(sql.unsafe`select 1`); // opens the connection
    describes = 0;
    for (let n = 1; n <= 5; n += 1) {
      const [a, b] = [await ours.query(mixed(n)), await theirs.query(mixed(n))];
      expect(a.rows).toEqual(b.rows);
      expect(a.fields).toEqual(b.fields);
      expect(a.rowCount).toBe(b.rowCount);
      expect(a.command).toBe(b.command);
    }
    expect(typeof (await ours.one(mixed(7))).n).toBe('bigint');
    // slonik's driver described the statement on each of its 5 executions; ours on the first of 6.
    expect(describes).toBe(5 + 1);
  });

  it('forgets the description after an error and describes again', async () => {
    const pool = await openPool(createSettleDriverFactory());
    const cast = (value: string) => sql.type(z.object({ x: z.number() }))`select ${value}::int as x`;
    expect(await pool.oneFirst(cast('1'))).toBe(1);
    describes = 0;
    expect(await pool.oneFirst(cast('2'))).toBe(2);
    expect(describes).toBe(0);
    await expect(pool.query(cast('not a number'))).rejects.toThrow(/invalid input syntax/);
    expect(await pool.oneFirst(cast('3'))).toBe(3);
    expect(describes).toBe(1); // the failed execution skipped it; the one after it described again
    expect(await pool.oneFirst(cast('4'))).toBe(4);
    expect(describes).toBe(1);
  });

  it("a statement whose result type changed fails as with slonik's driver, never read with the old description", async () => {
    await t.su.query(
      'create table public.shape_change (a int); insert into public.shape_change values (1); grant select on public.shape_change to settle_app',
    );
    const read = sql.type(z.object({ a: z.number() }).loose())`select * from public.shape_change`;
    const ours = await openPool(createSettleDriverFactory());
    const theirs = await openPool(undefined);
    expect(await ours.one(read)).toEqual({ a: 1 });
    expect(await ours.one(read)).toEqual({ a: 1 });
    expect(await theirs.one(read)).toEqual({ a: 1 });
    await t.su.query("alter table public.shape_change add column b text default 'new'");
    const oursError = await ours.query(read).then(
      () => null,
      (error: unknown) => error as { code?: string; cause?: { code?: string } },
    );
    const theirsError = await theirs.query(read).then(
      () => null,
      (error: unknown) => error as { code?: string; cause?: { code?: string } },
    );
    expect(oursError?.code ?? oursError?.cause?.code).toBe('0A000');
    expect(theirsError?.code ?? theirsError?.cause?.code).toBe('0A000');
    expect(oursError?.constructor).toBe(theirsError?.constructor);
  });

  it("keeps slonik's typed errors, unnamed queries and streams", async () => {
    const pool = await openPool(createSettleDriverFactory(), 1, false);
    await t.su.query(
      'create table public.unique_things (k text primary key); grant select, insert on public.unique_things to settle_app',
    );
    await pool.query(sql.unsafe`insert into public.unique_things values ('a')`);
    await expect(pool.query(sql.unsafe`insert into public.unique_things values ('a')`)).rejects.toBeInstanceOf(
      UniqueIntegrityConstraintViolationError,
    );
    const named = await openPool(createSettleDriverFactory());
    await named.query(sql.unsafe`insert into public.unique_things values ('b')`);
    await expect(named.query(sql.unsafe`insert into public.unique_things values ('b')`)).rejects.toBeInstanceOf(
      UniqueIntegrityConstraintViolationError,
    );
    const streamed: unknown[] = [];
    await pool.stream(sql.type(z.object({ n: z.number() }))`select generate_series(1, 3) as n`, (stream) => {
      stream.on('data', (event: { data: unknown }) => streamed.push(event.data));
    });
    expect(streamed).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
  });

  it('settle_app clients racing on four connections: every outcome right, each statement described at most once per connection', async () => {
    const client = t.client({ poolSize: 4 });
    const pool = await client.getPool();
    await Promise.all(Array.from({ length: 4 }, () => pool.query(sql.unsafe`select 1`)));
    describes = 0;
    const keys = Array.from({ length: 6 }, () => uniqueKey());
    // Six keys, each claimed by four racers at once; exactly one acquires, completes, and every
    // later claim replays the result.
    const rounds = await Promise.all(
      keys.map(async (key, i) => {
        const claims = await Promise.all(
          Array.from({ length: 4 }, () => client.claim({ tenant: 'acme', key, request: { i }, binding })),
        );
        const acquired = claims.filter((claim) => claim.outcome === 'acquired');
        expect(acquired).toHaveLength(1);
        expect(
          claims.filter((claim) => claim.outcome !== 'acquired').every((claim) => claim.outcome === 'in_progress'),
        ).toBe(true);
        const [winner] = acquired;
        if (winner?.outcome !== 'acquired') throw new Error('expected acquired');
        expect(await client.complete(winner.attempt, { charge: i })).toMatchObject({ outcome: 'settled' });
        return client.claim({ tenant: 'acme', key, request: { i }, binding });
      }),
    );
    rounds.forEach((replay, i) => expect(replay).toMatchObject({ outcome: 'replay', result: { charge: i } }));
    // Two statements (claim, complete) on at most four connections.
    expect(describes).toBeGreaterThan(0);
    expect(describes).toBeLessThanOrEqual(2 * 4);
  });
});
