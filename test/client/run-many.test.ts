// client.claimMany / completeMany / runMany / idempotentMany against a real PostgreSQL as
// settle_app: one claim call and one complete call for many keys, every key answered as run()
// answers it; concurrent batches over the same keys in opposite orders run each effect once.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  BatchTooLargeError,
  BatchTooManyBytesError,
  IdempotencyConflictError,
  InvalidKeyError,
  InvalidRequestError,
  LIMITS,
  OperationFailedError,
  type ItemReport,
  type RunOutcome,
} from '../../src/index.js';
import { binding, tableCounts, uniqueKey, useClientTest } from './helpers.js';

const t = useClientTest('client_run_many');

const items = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({ key: uniqueKey(`${label}${i}`), request: { n: i } }));
/** An error named 'FinalError' is a final failure; anything else is retryable. */
const classify = (error: unknown) =>
  ((error as Error).name === 'FinalError' ? 'final' : 'retryable') as 'final' | 'retryable';
const finalError = (message: string) => Object.assign(new Error(message), { name: 'FinalError' });
const fulfilled = <T>(value: T): ItemReport<T> => ({ status: 'fulfilled', value });

describe('claimMany and completeMany', () => {
  it('claim every item in one call, complete every handle in one call; answers in order', async () => {
    const batch = items('cm', 4);
    const claimed = await t.app.claimMany({ tenant: 'acme', binding, items: batch });
    expect(claimed.map((c) => c.outcome)).toEqual(['acquired', 'acquired', 'acquired', 'acquired']);
    const handles = claimed.flatMap((c) => (c.outcome === 'acquired' ? [c.attempt] : []));
    expect(handles.map((h) => h.key)).toEqual(batch.map((b) => b.key));
    const observed = await t.app.completeMany(
      handles,
      handles.map((h) => ({ done: h.key })),
    );
    expect(observed.map((o) => [o.outcome, o.reason])).toEqual(handles.map(() => ['settled', 'current_attempt']));
    const again = await t.app.claimMany({ tenant: 'acme', binding, items: batch });
    expect(again.map((c) => (c.outcome === 'replay' ? c.result : c.outcome))).toEqual(
      batch.map((b) => ({ done: b.key })),
    );
  });

  it('no items: no call, no outcomes; more than LIMITS.maxBatchKeys: BatchTooLargeError before any call', async () => {
    expect(await t.app.claimMany({ tenant: 'acme', binding, items: [] })).toEqual([]);
    expect(await t.app.completeMany([], [])).toEqual([]);
    const many = Array.from({ length: LIMITS.maxBatchKeys + 1 }, (_, i) => ({ key: `k${i}`, request: {} }));
    await expect(t.app.claimMany({ tenant: 'acme', binding, items: many })).rejects.toBeInstanceOf(BatchTooLargeError);
  });

  it('requests or results over LIMITS.maxBatchBytes together: BatchTooManyBytesError (SE064) before any call', async () => {
    const before = await tableCounts(t.su);
    // 257 requests of 65,300 bytes of JSON text: each under LIMITS.requestBytes, 16.8 MB together.
    const pad = 'x'.repeat(65_300 - '{"p": ""}'.length);
    const heavy = Array.from({ length: 257 }, (_, i) => ({ key: uniqueKey(`heavy${i}`), request: { p: pad } }));
    const error = await t.app.claimMany({ tenant: 'acme', binding, items: heavy }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BatchTooManyBytesError);
    expect(error).toBeInstanceOf(BatchTooLargeError);
    expect((error as BatchTooManyBytesError).detail).toEqual({
      field: 'requests',
      max_bytes: LIMITS.maxBatchBytes,
      bytes: 257 * 65_300,
    });
    const claimed = await t.app.claimMany({ tenant: 'acme', binding, items: items('heavyr', 17) });
    const handles = claimed.flatMap((c) => (c.outcome === 'acquired' ? [c.attempt] : []));
    const big = { p: 'y'.repeat(1_000_000) };
    await expect(
      t.app.completeMany(
        handles,
        handles.map(() => big),
      ),
    ).rejects.toBeInstanceOf(BatchTooManyBytesError);
    expect((await tableCounts(t.su)).operations).toBe(before.operations + 17);
    const { rows } = await t.su.query<{ n: number }>(
      'select count(*)::int as n from settle.attempts where key = any ($1) and settled',
      [handles.map((h) => h.key)],
    );
    expect(rows[0]?.n).toBe(0);
  });

  it('a bad item is its single-key error, its path under items[i] and its ordinal in detail', async () => {
    const batch = [...items('bad', 2), { key: ' padded', request: {} }];
    const error = await t.app.claimMany({ tenant: 'acme', binding, items: batch }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidKeyError);
    expect((error as InvalidKeyError).issues[0]?.path).toEqual(['items', 2, 'key']);
    expect((error as InvalidKeyError).detail).toMatchObject({ ordinal: 3 });
    const big = await t.app
      .claimMany({ tenant: 'acme', binding, items: [{ key: 'k', request: { x: 'y'.repeat(70_000) } }] })
      .catch((e: unknown) => e);
    expect(big).toBeInstanceOf(InvalidRequestError);
  });
});

describe('runMany', () => {
  it('results over LIMITS.maxBatchBytes together are all completed (in as many calls as they need)', async () => {
    const batch = items('heavyrun', 20);
    const outcomes = await t.app.runMany({ tenant: 'acme', binding, items: batch }, async (context) =>
      context.items.map((item) => fulfilled({ index: item.index, pad: 'z'.repeat(1_000_000) })),
    );
    expect(outcomes.map((o) => o.outcome)).toEqual(batch.map(() => 'completed'));
    const { rows } = await t.su.query<{ n: number }>(
      'select count(*)::int as n from settle.attempts where key = any ($1) and settled',
      [batch.map((b) => b.key)],
    );
    expect(rows[0]?.n).toBe(20);
  });

  it('one effect gets every acquired item; per-item reports settle, fail or retry each as run() would', async () => {
    const batch = items('rm', 4);
    let calls = 0;
    const outcomes = await t.app.runMany(
      { tenant: 'acme', binding, items: batch, maxAttempts: 3, classify },
      async (context) => {
        calls += 1;
        expect(context.items.map((i) => [i.index, i.key, i.attempt.attempt])).toEqual(
          batch.map((b, i) => [i, b.key, 1]),
        );
        return context.items.map((item): ItemReport<{ paid: number }> => {
          if (item.index === 1) return { status: 'rejected', reason: new Error('declined') };
          if (item.index === 2) return { status: 'rejected', reason: finalError('bad card') };
          return fulfilled({ paid: item.index });
        });
      },
    );
    expect(calls).toBe(1);
    expect(outcomes.map((o) => o.outcome)).toEqual(['completed', 'failed', 'failed', 'completed']);
    expect(outcomes.map((o) => (o.outcome === 'failed' ? o.final : null))).toEqual([null, false, true, null]);
    expect(outcomes[0]).toMatchObject({ outcome: 'completed', result: { paid: 0 }, settledBy: 'this_attempt' });

    // Again: replays for the completed ones, the failed ones run again (a retryable failure).
    const seen: number[] = [];
    const again = await t.app.runMany(
      { tenant: 'acme', binding, items: batch, maxAttempts: 3, classify },
      async (context) => {
        seen.push(...context.items.map((i) => i.index));
        return context.items.map((item) => fulfilled({ paid: 10 + item.index }));
      },
    );
    expect(again.map((o) => o.outcome)).toEqual(['replay', 'completed', 'failed', 'replay']);
    expect(again[1]).toMatchObject({ result: { paid: 11 } });
    expect(seen).toEqual([1]);
  });

  it('an effect that throws fails every acquired item; a result the schema refuses is unknown, never re-run blindly', async () => {
    const batch = items('throw', 2);
    const thrown = await t.app.runMany({ tenant: 'acme', binding, items: batch }, async () => {
      throw new Error('downstream down');
    });
    expect(thrown.map((o) => o.outcome)).toEqual(['failed', 'failed']);

    const schemaBatch = items('schema', 2);
    const outcomes = await t.app.runMany(
      { tenant: 'acme', binding, items: schemaBatch },
      async (context) =>
        context.items.map((item) =>
          fulfilled(item.index === 0 ? { id: 'ok' } : ({ id: 42 } as unknown as { id: string })),
        ),
      { result: z.object({ id: z.string() }) },
    );
    expect(outcomes.map((o) => o.outcome)).toEqual(['completed', 'unknown']);
    expect((outcomes[1] as Extract<RunOutcome, { outcome: 'unknown' }>).reason).toBe('effect_outcome_unknown');
  });

  it('a key listed twice runs once: the second answers in_progress', async () => {
    const [a] = items('twice', 1);
    if (a === undefined) throw new Error('no item');
    const outcomes = await t.app.runMany({ tenant: 'acme', binding, items: [a, a] }, async (context) => {
      expect(context.items).toHaveLength(1);
      return [fulfilled('done')];
    });
    expect(outcomes.map((o) => o.outcome)).toEqual(['completed', 'in_progress']);
  });

  it('four clients run overlapping batches in opposite orders: no deadlock, each effect runs once', async () => {
    const batch = items('race', 30);
    const clients = [t.client(), t.client(), t.client(), t.client()];
    const ran = new Map<string, number>();
    const results = await Promise.all(
      clients.map((client, c) => {
        const order = c % 2 === 0 ? batch : [...batch].reverse();
        return client.runMany({ tenant: 'acme', binding, items: order }, async (context) => {
          for (const item of context.items) ran.set(item.key, (ran.get(item.key) ?? 0) + 1);
          return context.items.map((item) => fulfilled({ key: item.key }));
        });
      }),
    );
    expect([...ran.values()].every((n) => n === 1)).toBe(true);
    for (const outcomes of results) {
      expect(outcomes.every((o) => ['completed', 'replay', 'in_progress'].includes(o.outcome))).toBe(true);
    }
    // After everyone is done, every key is settled once.
    const final = await t.app.runMany({ tenant: 'acme', binding, items: batch }, async () => {
      throw new Error('must not run');
    });
    expect(final.every((o) => o.outcome === 'replay')).toBe(true);
    expect(ran.size).toBe(30);
  });
});

describe('idempotentMany', () => {
  it('wraps a batch function: only the items that must run reach it, one settled result per item', async () => {
    const charged: string[] = [];
    const chargeAll = t.app.idempotentMany(
      async (orders: readonly { id: string; cents: number }[]) => {
        charged.push(...orders.map((o) => o.id));
        return orders.map(
          (o): ItemReport<{ charged: number }> =>
            o.cents < 0 ? { status: 'rejected', reason: finalError('negative') } : fulfilled({ charged: o.cents }),
        );
      },
      { tenant: 'acme', binding, classify, key: (o) => o.id, request: (o) => ({ cents: o.cents }) },
    );
    const orders = [
      { id: uniqueKey('o'), cents: 100 },
      { id: uniqueKey('o'), cents: -1 },
    ];
    const first = await chargeAll(orders);
    expect(first[0]).toEqual({ status: 'fulfilled', value: { charged: 100 } });
    expect(first[1]?.status).toBe('rejected');
    expect((first[1] as PromiseRejectedResult).reason).toBeInstanceOf(OperationFailedError);
    const second = await chargeAll([...orders, { id: orders[0]?.id as string, cents: 999 }]);
    expect(second[0]).toEqual({ status: 'fulfilled', value: { charged: 100 } });
    expect((second[2] as PromiseRejectedResult).reason).toBeInstanceOf(IdempotencyConflictError);
    expect(charged).toEqual([orders[0]?.id, orders[1]?.id]);
  });
});
