import { readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BENCH_DIR } from '../../bench/lib/database.js';
import { closeServer, driveHttp, listen, postPayment } from '../../bench/lib/http-load.js';
import { createStripeApp } from '../../bench/lib/http-stripe-app.js';
import { withPgClient } from '../../src/db/with-pg-client.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

// The `http-stripe` side of the http scenario (bench/lib/http-stripe-app.ts): the Express
// example's POST /payments with the Stripe pattern written by hand is a real idempotency layer,
// so the middleware is measured against something that does the same job: a first request runs
// the handler once and stores its response, a retry replays it, other parameters are refused,
// a key held by a request in flight answers 409.

let db: TestDatabase;
let pool: pg.Pool;
let server: ReturnType<ReturnType<typeof createStripeApp>['listen']>;
let url: string;
const TOKEN = 'bench:alice';

beforeAll(async () => {
  db = await createTestDatabase('bench_http_stripe');
  const baselines = await readFile(path.join(BENCH_DIR, 'sql', 'baselines.sql'), 'utf8');
  await withPgClient(db.url, (c) => c.query(baselines));
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  server = createStripeApp(pool).listen(0, '127.0.0.1');
  url = await listen(server);
});

afterAll(async () => {
  if (server !== undefined) await closeServer(server);
  await pool?.end();
  await db?.drop();
});

const post = (key: string, body: unknown = { amount: '19.99' }) =>
  fetch(`${url}/payments`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'idempotency-key': `"${key}"` },
    body: JSON.stringify(body),
  });

describe('the Express app doing the Stripe pattern by hand', () => {
  it('runs a first request once, stores its response and replays it to a retry', async () => {
    const first = await postPayment(url, 'k-1', TOKEN);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    const charge = await first.json();
    const retry = await post('k-1');
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(await retry.json()).toEqual(charge);
    const rows = await pool.query(
      `select locked_at, recovery_point, response_code, response_body from bench.stripe_keys where idempotency_key = 'k-1'`,
    );
    expect(rows.rows).toEqual([
      { locked_at: null, recovery_point: 'finished', response_code: 201, response_body: charge },
    ]);
  });

  it('refuses the key with other parameters, and answers 409 while the key is held', async () => {
    const changed = await post('k-1', { amount: '20.00' });
    expect(changed.status).toBe(422);
    await pool.query(
      `insert into bench.stripe_keys (idempotency_key, locked_at, request_method, request_params, request_path, recovery_point, user_id)
       values ('k-held', now(), 'POST', '{"amount": "19.99"}', '/payments', 'started', 1)`,
    );
    const held = await post('k-held');
    expect(held.status).toBe(409);
  });

  it('under the load driver: one finished key row per request, every answer checked', async () => {
    let n = 0;
    const run = await driveHttp(url, {
      clients: 4,
      perClient: 5,
      key: () => `load-${n++}`,
      replayed: false,
      token: TOKEN,
      name: 'stripe',
    });
    expect(run.requests).toBe(20);
    const rows = await pool.query<{ n: string }>(
      `select count(*)::text as n from bench.stripe_keys where idempotency_key like 'load-%' and recovery_point = 'finished' and locked_at is null`,
    );
    expect(rows.rows).toEqual([{ n: '20' }]);
    // A replay where a first request is expected fails the run.
    await expect(
      driveHttp(url, { clients: 1, perClient: 1, key: () => 'load-0', replayed: false, token: TOKEN, name: 'stripe' }),
    ).rejects.toThrow(/stripe: unexpected answer 201 replayed=true/);
  });
});
