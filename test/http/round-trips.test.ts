// The middleware's cost in database round trips, counted by a slonik interceptor on the client's
// pool (every query is one round trip): 2 on a first request (claim + complete), 1 on a replay
// or a 409, plus one per heartbeat while a long handler works.
import { createPool, type Interceptor } from 'slonik';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, settleInterceptors, settleTypeParsers, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { ALL_FRAMEWORKS, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest, until } from './support.js';

let ctx: HttpTestContext;
let settle: SettleClient;
const statements: string[] = [];

beforeAll(async () => {
  ctx = await setupHttpTest('http_round_trips');
  const counter: Interceptor = {
    name: 'count-round-trips',
    beforeQueryExecution: (_context, query) => {
      statements.push(query.sql.replace(/\s+/g, ' ').trim().slice(0, 40));
      return null;
    },
  };
  const pool = await createPool(asRole(ctx.db.url, 'settle_app'), {
    maxPoolSize: 4,
    typeParsers: settleTypeParsers(),
    interceptors: [...settleInterceptors(), counter],
    resetConnection: async () => {},
  });
  settle = createSettleClient({ pool });
});
afterAll(async () => {
  await (await settle?.getPool())?.end();
  await ctx?.close();
});

const measure = async (fn: () => Promise<unknown>): Promise<string[]> => {
  statements.length = 0;
  await fn();
  return [...statements];
};

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let app: TestApp;
  beforeAll(async () => {
    app = await startApp(framework, { settle, orders: { leaseMs: 3_000, heartbeatIntervalMs: 1_000 } });
  });
  afterAll(async () => app?.close());

  test('first request: 2 round trips (claim, complete); replay: 1; in flight (409): 1; a long handler adds its heartbeats', async () => {
    const key = newKey();
    const first = await measure(() => send(`${app.url}/orders`, { key, json: { n: 1 } }));
    expect(first.map((s) => s.match(/settle\.(\w+)/)?.[1])).toEqual(['claim', 'complete']);
    const replay = await measure(() => send(`${app.url}/orders`, { key, json: { n: 1 } }));
    expect(replay.map((s) => s.match(/settle\.(\w+)/)?.[1])).toEqual(['claim']);

    const slowKey = newKey();
    const hold = app.hooks.hold();
    statements.length = 0;
    const slow = send(`${app.url}/orders`, { key: slowKey, json: { n: 2 } });
    await hold.entered;
    const conflict = await measure(() => send(`${app.url}/orders`, { key: slowKey, json: { n: 2 } }));
    expect(conflict.map((s) => s.match(/settle\.(\w+)/)?.[1])).toEqual(['claim']);
    // Hold the handler until the keeper has renewed the lease twice (heartbeat every 1 s).
    const heartbeats = () => statements.filter((s) => s.includes('settle.heartbeat')).length;
    await until(async () => heartbeats() >= 2);
    statements.length = 0;
    hold.release();
    await slow;
    expect(statements.map((s) => s.match(/settle\.(\w+)/)?.[1]).filter((s) => s !== 'heartbeat')).toEqual(['complete']);
  });
});

// The same, counted by the server (pg_stat_statements, utility statements included) for the
// client's own pool as an application creates it, in both modes. Skipped only where the
// server was started without the extension preloaded.
describe('counted by the server (pg_stat_statements)', () => {
  let app: TestApp;
  let available = false;
  beforeAll(async () => {
    const preload = await ctx.su.query<{ v: string }>(`select current_setting('shared_preload_libraries') as v`);
    available = preload.rows[0]!.v.includes('pg_stat_statements');
    if (available) await ctx.su.query('create extension if not exists pg_stat_statements');
    app = await startApp('express', { settle: ctx.settle });
    await ctx.settle.getPool(); // creates the pool now (slonik reads pg_type once, at creation)
  });
  afterAll(async () => app?.close());

  const serverStatements = async (fn: () => Promise<unknown>): Promise<{ query: string; calls: number }[]> => {
    await ctx.su.query('select pg_stat_statements_reset()');
    await fn();
    const { rows } = await ctx.su.query<{ query: string; calls: number }>(
      `select regexp_replace(query, '\\s+', ' ', 'g') as query, calls::int from pg_stat_statements
        where dbid = (select oid from pg_database where datname = current_database())
          and userid = 'settle_app'::regrole order by query`,
    );
    return rows;
  };
  const total = (rows: { calls: number }[]): number => rows.reduce((sum, r) => sum + r.calls, 0);

  test("lease mode: 2 on a first request, 1 on a replay; transaction mode: 5 plus the session reset and the handler's own SQL", async (t) => {
    if (!available) t.skip('the test server was started without shared_preload_libraries=pg_stat_statements');
    const key = newKey();
    const first = await serverStatements(() => send(`${app.url}/orders`, { key, json: { n: 1 } }));
    expect(total(first), JSON.stringify(first)).toBe(2);
    const replay = await serverStatements(() => send(`${app.url}/orders`, { key, json: { n: 1 } }));
    expect(total(replay), JSON.stringify(replay)).toBe(1);
    const txKey = newKey();
    const tx = await serverStatements(() =>
      send(`${app.url}/ledger`, { key: txKey, json: { account: `acct-${txKey}` } }),
    );
    // START TRANSACTION, claim, SAVEPOINT, the handler's insert, complete, COMMIT: 5 of the
    // middleware's + the handler's own. The client pool's session reset after a transaction (a
    // DO block) is one more, sent when the connection is released or next borrowed: counted
    // here only if it already ran.
    const kinds = tx.map((r) => (/settle\.(\w+)\(/.exec(r.query)?.[1] ?? r.query.split(' ')[0]!).toLowerCase()).sort();
    expect(
      kinds.filter((k) => k !== 'do'),
      JSON.stringify(tx),
    ).toEqual(['claim', 'commit', 'complete', 'insert', 'savepoint', 'start']);
    expect(total(tx.filter((r) => !r.query.startsWith('DO ')))).toBe(6);
  });
});
