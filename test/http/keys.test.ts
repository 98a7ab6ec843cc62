// The middleware's keys in the tenant's key space (a keyPrefix keeps them apart from the
// application's own run() keys, and feed consumers filter by it), the downstreamKey a reconciler
// can rebuild, and retries of an in-doubt key that wait without spending the attempt budget.
// Express 5 on a real server, a real PostgreSQL.
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createSettleClient, downstreamKeyOf, type FeedEvent } from '../../src/index.js';
import { byKeyPrefix, createIdempotency, type IdempotencyContext, type InDoubtKey } from '../../src/http/express.js';
import { asRole, waitFor } from '../client/helpers.js';
import { type HttpTestContext, newKey, send, setupHttpTest } from './support.js';

let ctx: HttpTestContext;
let url: string;
let close: () => Promise<void>;
const seen: IdempotencyContext[] = [];
const asked: InDoubtKey[] = [];
let verdict: 'run' | 'wait' = 'wait';
let gatewayAnswers = 0;

beforeAll(async () => {
  ctx = await setupHttpTest('http_keys');
  const app = express();
  app.use(express.json());
  const idempotency = createIdempotency({
    settle: ctx.settle,
    binding: () => ({ tenant: 'acme', principal: 'alice', generation: 1 }),
    keyPrefix: 'http:',
  });
  app.post('/payouts', idempotency(), (req, res) => {
    if (req.idempotency !== undefined) seen.push(req.idempotency);
    res.status(201).json({ payout: req.idempotency?.key });
  });
  // Answers 504 (outcome unknown) on its first attempt; the retries ask beforeRerun first.
  app.post(
    '/provider',
    idempotency({
      beforeRerun: async (key) => {
        asked.push(key);
        return verdict;
      },
    }),
    (req, res) => {
      if (req.idempotency !== undefined) seen.push(req.idempotency);
      gatewayAnswers += 1;
      if (gatewayAnswers === 1) res.status(504).json({ error: 'provider timed out' });
      else res.status(201).json({ charged: true, attempt: req.idempotency?.attempt });
    },
  );
  const server = app.listen(0, '127.0.0.1');
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  close = () => new Promise((resolve) => server.close(() => resolve()));
});
afterAll(async () => {
  await close?.();
  await ctx?.close();
});

async function operation(key: string) {
  const { rows } = await ctx.su.query<{
    attempt: number;
    max_attempts: number;
    status: string;
    dead_letter_reason: string | null;
  }>(
    `select attempt, max_attempts, status::text, dead_letter_reason from settle.operations where tenant = 'acme' and key = $1`,
    [key],
  );
  return rows[0];
}

describe('keyPrefix', () => {
  test('the engine stores prefix + key; the same key in run() is another operation; the feed filter sees only the prefixed ones', async () => {
    await ctx.su.query(`select settle.register_consumer(name => 'http-ledger')`);
    const key = newKey();
    const first = await send(`${url}/payouts`, { key, json: { amount: '5.00' } });
    expect(first.status).toBe(201);
    expect(first.json()).toEqual({ payout: key });
    expect(await operation(`http:${key}`)).toMatchObject({ status: 'completed' });
    expect(await operation(key)).toBeUndefined();
    const context = seen.at(-1);
    expect(context).toMatchObject({ key, operationKey: `http:${key}`, tenant: 'acme' });
    // A reconciler that has only the tenant and the stored key rebuilds the downstream key.
    expect(context?.downstreamKey).toBe(downstreamKeyOf('acme', `http:${key}`));
    expect(downstreamKeyOf('acme', `http:${key}`)).toMatch(/^[0-9a-f]{40}$/);

    // The application's own run() with the same raw key: its own operation, no conflict.
    const own = await ctx.settle.run(
      { tenant: 'acme', key, request: { other: true }, binding: { principal: 'job', generation: 1 } },
      async () => 'own',
    );
    expect(own).toMatchObject({ outcome: 'completed', result: 'own' });

    const delivered: FeedEvent[] = [];
    const controller = new AbortController();
    const consumer = createSettleClient({ connectionString: asRole(ctx.db.url, 'settle_consumer'), poolSize: 2 });
    const done = consumer.consume(
      'http-ledger',
      byKeyPrefix('http:', async (events: readonly FeedEvent[]) => {
        delivered.push(...events);
      }),
      { signal: controller.signal, idleMs: 20, maxIdleMs: 200, onError: () => {} },
    );
    await waitFor(async () => delivered.some((e) => e.key === `http:${key}`), 60_000);
    // run()'s event came before the sentinel below in the feed; the filter dropped it.
    const sentinel = newKey();
    expect((await send(`${url}/payouts`, { key: sentinel, json: {} })).status).toBe(201);
    await waitFor(async () => delivered.some((e) => e.key === `http:${sentinel}`), 60_000);
    controller.abort();
    await done;
    await consumer.end();
    expect(delivered.every((e) => e.key.startsWith('http:'))).toBe(true);
    expect(delivered.filter((e) => e.key === `http:${key}`)).toHaveLength(1);
  });

  test('the prefix takes its length from the key limit; a bad prefix is refused at setup', async () => {
    expect((await send(`${url}/payouts`, { key: 'k'.repeat(250), json: {} })).status).toBe(201);
    const tooLong = await send(`${url}/payouts`, { key: 'k'.repeat(251), json: {} });
    expect(tooLong.status).toBe(400);
    expect(tooLong.json()).toMatchObject({ type: 'urn:pg-settle:problem:idempotency-key-malformed' });
    expect(() => createIdempotency({ settle: ctx.settle, keyPrefix: 'has space' })).toThrow(RangeError);
    expect(() => createIdempotency({ settle: ctx.settle, keyPrefix: '' })).toThrow(RangeError);
    expect(() => createIdempotency({ settle: ctx.settle, beforeRerun: () => 'run', rerunAfterUnknown: true })).toThrow(
      RangeError,
    );
  });
});

describe('beforeRerun', () => {
  test('retries that wait for the downstream answer in-doubt without spending attempts; "run" runs the handler as the next attempt', async () => {
    const key = newKey();
    const first = await send(`${url}/provider`, { key, json: { amount: '9.00' } });
    expect(first.status).toBe(504);
    expect(await operation(`http:${key}`)).toMatchObject({ status: 'unknown', attempt: 1, max_attempts: 5 });
    const firstContext = seen.at(-1);

    // More retries than the budget has attempts: none opens one, none dead-letters the key.
    for (let i = 0; i < 7; i += 1) {
      const waiting = await send(`${url}/provider`, { key, json: { amount: '9.00' } });
      expect(waiting.status).toBe(500);
      expect(waiting.headers.get('retry-after')).toBe('1');
      expect(waiting.json()).toMatchObject({ type: 'urn:pg-settle:problem:outcome-unknown', deadLettered: false });
    }
    expect(gatewayAnswers).toBe(1);
    expect(await operation(`http:${key}`)).toMatchObject({ status: 'unknown', attempt: 1, dead_letter_reason: null });
    expect(asked).toHaveLength(7);
    expect(asked[0]).toEqual({
      tenant: 'acme',
      key,
      operationKey: `http:${key}`,
      downstreamKey: firstContext?.downstreamKey,
      attempt: 1,
    });

    verdict = 'run';
    const ran = await send(`${url}/provider`, { key, json: { amount: '9.00' } });
    expect(ran.status).toBe(201);
    expect(ran.json()).toEqual({ charged: true, attempt: 2 });
    expect(seen.at(-1)).toMatchObject({
      attempt: 2,
      earlier: { reportedUnknown: true },
      downstreamKey: firstContext?.downstreamKey,
    });
    const replay = await send(`${url}/provider`, { key, json: { amount: '9.00' } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(gatewayAnswers).toBe(2);
    expect(asked).toHaveLength(8);
  });
});
