import { sql } from 'slonik';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  createSettleClient,
  type RetryEvent,
  SettleRetryableError,
  SettleRowValidationError,
} from '../../src/index.js';
import { asRole, binding, useClientTest, someoneWaitsOnLock, uniqueKey, waitFor } from './helpers.js';

const t = useClientTest('client_retry');

describe('transparent retry of 40001', () => {
  it('a REPEATABLE READ heartbeat that loses a serialization race is retried and succeeds', async () => {
    // Sessions of this client run every statement at REPEATABLE READ. Interleaving:
    //   su:  BEGIN; lock the operation row
    //   rr:  heartbeat (snapshot taken) -> blocks on the row lock
    //   su:  UPDATE the row; COMMIT -> rr's FOR UPDATE fails with 40001
    //   rr:  the client retries with a fresh snapshot -> extended
    const events: RetryEvent[] = [];
    const url = new URL(t.db.url);
    url.searchParams.set('options', '-c role=settle_app -c default_transaction_isolation=repeatable\\ read');
    const rr = createSettleClient({
      connectionString: url.toString(),
      poolSize: 1,
      onRetry: (event) => events.push(event),
    });
    try {
      const key = uniqueKey();
      const claimed = await t.app.claim({ tenant: 'acme', key, request: {}, binding });
      if (claimed.outcome !== 'acquired') throw new Error('expected acquired');

      await t.su.query('begin');
      await t.su.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
        'acme',
        key,
      ]);
      const heartbeat = rr.heartbeat(claimed.attempt, { leaseMs: 60_000 });
      await waitFor(() => someoneWaitsOnLock(t.su));
      await t.su.query(
        'update settle_private.operations set updated_at = clock_timestamp() where tenant = $1 and key = $2',
        ['acme', key],
      );
      await t.su.query('commit');

      expect(await heartbeat).toMatchObject({ outcome: 'extended' });
      expect(events.length).toBeGreaterThanOrEqual(1);
      expect(events[0]).toMatchObject({ operation: 'heartbeat', retry: 1 });
      expect(events[0]?.error).toBeInstanceOf(SettleRetryableError);
      expect(events[0]?.error).toMatchObject({ sqlstate: '40001' });
    } finally {
      await t.su.query('rollback').catch(() => {});
      await rr.end();
    }
  });

  it('inside a caller transaction the error propagates (the transaction must be retried whole)', async () => {
    const pool = await t.app.getPool();
    const key = uniqueKey();
    const claimed = await t.app.claim({ tenant: 'acme', key, request: {}, binding });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
    const events: RetryEvent[] = [];
    const client = t.client({ onRetry: (event) => events.push(event) });
    const error = await pool
      .transaction(async (tx) => {
        await tx.query(sql.unsafe`set transaction isolation level repeatable read`);
        await tx.query(sql.unsafe`select 1`); // take the snapshot now
        await t.su.query(
          "update settle_private.operations set updated_at = clock_timestamp() where tenant = 'acme' and key = $1",
          [key],
        );
        return client.heartbeat(claimed.attempt, { connection: tx });
      }, 1)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SettleRetryableError);
    expect(events).toEqual([]);
  });
});

describe('type parsing', () => {
  it('int8 stays exact (bigint), timestamptz is a Date, numeric is a string, jsonb is parsed', async () => {
    const pool = await t.app.getPool();
    const row = await pool.one(sql.type(
      z.object({ big: z.bigint(), at: z.date(), money: z.string(), doc: z.object({ a: z.array(z.number()) }) }),
    )`select 9007199254740993::int8 as big, timestamptz '2026-01-02 03:04:05.678+05:30' as at,
             10.50::numeric as money, '{"a":[1,2]}'::jsonb as doc`);
    expect(row.big).toBe(9007199254740993n);
    expect(row.at.toISOString()).toBe('2026-01-01T21:34:05.678Z');
    expect(row.money).toBe('10.50');
    expect(row.doc).toEqual({ a: [1, 2] });
  });

  it('a binding generation above 2^53 round-trips exactly', async () => {
    const generation = 2n ** 62n + 1n;
    const key = uniqueKey();
    const claimed = await t.app.claim({ tenant: 'acme', key, request: {}, binding: { ...binding, generation } });
    if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
    expect(claimed.attempt.binding.generation).toBe(generation);
    expect((await t.admin.inspect({ tenant: 'acme', key }))?.bindingGeneration).toBe(generation);
    expect(await t.app.complete(claimed.attempt, 1)).toMatchObject({ outcome: 'settled' });
  });

  it('the result-parser interceptor validates every row of sql.type() queries', async () => {
    const pool = await t.app.getPool();
    const error = await pool.any(sql.type(z.object({ n: z.string() }))`select 1 as n`).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SettleRowValidationError);
    expect((error as SettleRowValidationError).issues[0]?.path).toEqual(['n']);
  });

  it('over a caller pool without the interceptor, the client still validates rows', async () => {
    const { createPool } = await import('slonik');
    const pool = await createPool(asRole(t.db.url, 'settle_app'));
    const client = createSettleClient({ pool });
    try {
      const key = uniqueKey();
      const claimed = await client.claim({ tenant: 'acme', key, request: { a: 1 }, binding });
      expect(claimed.outcome).toBe('acquired');
      if (claimed.outcome !== 'acquired') throw new Error('expected acquired');
      expect(claimed.attempt.leaseExpiresAt).toBeInstanceOf(Date); // slonik's default parser gives epoch ms
      expect(await client.get({ tenant: 'acme', key, request: { a: 1 }, binding })).toMatchObject({
        outcome: 'found',
        status: 'running',
        attempt: 1,
      });
    } finally {
      await client.end();
      await pool.end();
    }
  });
});
