import { describe, expect, it } from 'vitest';
import { JsonText } from './support/api.js';
import { useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation } from './support/inspect.js';
import { acquire, claim, complete, fail } from './support/settle.js';

const db = useEngineDatabase('claim_outcomes');

describe('settle.claim outcomes', () => {
  it('acquired: attempt 1, a lease token and a v1 fingerprint', async () => {
    const app = await db.app();
    const op = newOperation('acquired');
    const row = await claim(app, op);
    expect(row).toMatchObject({
      outcome: 'acquired',
      status: 'running',
      attempt: 1,
      result: null,
      error: null,
      conflict_on: null,
    });
    expect(row.lease_token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(row.fingerprint).toMatch(/^v1:[0-9a-f]{64}$/);
    expect(row.lease_expires_at?.getTime()).toBeGreaterThan(Date.now() - 5_000);
  });

  it('in_progress: a second claim while the lease is live gets retry_after_ms and no token', async () => {
    const app = await db.app();
    const op = newOperation('in-progress');
    const first = await claim(app, op);
    const second = await claim(app, op);
    expect(second).toMatchObject({ outcome: 'in_progress', status: 'running', attempt: 1, lease_token: null });
    expect(second.retry_after_ms).toBeGreaterThan(0);
    expect(second.retry_after_ms).toBeLessThanOrEqual(30_000);
    expect(second.lease_expires_at?.getTime()).toBe(first.lease_expires_at?.getTime());
  });

  it('replay: after complete, the same result byte for byte and the settled attempt', async () => {
    const app = await db.app();
    const op = newOperation('replay');
    const ticket = await acquire(app, op);
    const settled = await complete(app, ticket, new JsonText('{"receipt":"r-1","amount":10.50,"lines":[3,1]}'));
    expect(settled).toMatchObject({ outcome: 'settled', status: 'completed', settled_attempt: 1 });
    const replay = await claim(app, op);
    expect(replay).toMatchObject({ outcome: 'replay', status: 'completed', settled_attempt: 1, lease_token: null });
    expect(replay.result_text).toBe(settled.result_text);
    expect(replay.result).toEqual({ receipt: 'r-1', amount: 10.5, lines: [3, 1] });
  });

  it('failed: after a final failure, the stored error', async () => {
    const app = await db.app();
    const op = newOperation('failed');
    const ticket = await acquire(app, op);
    const failure = { code: 'card_declined', detail: { bank: 'x' } };
    expect(await fail(app, ticket, failure, false)).toMatchObject({
      outcome: 'settled',
      reason: 'final_failure',
      status: 'failed',
    });
    const again = await claim(app, op);
    expect(again).toMatchObject({
      outcome: 'failed',
      status: 'failed',
      error: failure,
      dead_lettered: false,
      result: null,
      lease_token: null,
    });
  });

  const mismatches = [
    { part: 'request', change: { request: { amount: '99.00', currency: 'EUR', to: 'acct-42' } } },
    { part: 'principal', change: { principal: 'svc-other' } },
    { part: 'scopes', change: { scopes: ['payments:write', 'payments:refund'] } },
    { part: 'binding_generation', change: { binding_generation: 2 } },
  ] as const;

  for (const { part, change } of mismatches) {
    it(`conflict on ${part}: nothing disclosed, the lock unchanged, an audit row written`, async () => {
      const app = await db.app();
      const admin = await db.connect();
      const op = newOperation(`conflict-${part}`);
      const ticket = await acquire(app, op);
      await complete(app, ticket, { receipt: 'secret' });
      const before = await mustGetOperation(admin, ticket.tenant, ticket.key);

      const row = await claim(app, { ...op, ...change });
      expect(row).toEqual({
        outcome: 'conflict',
        conflict_on: [part === 'request' ? 'request' : 'binding'],
        status: null,
        attempt: null,
        lease_token: null,
        lease_expires_at: null,
        retry_after_ms: null,
        fingerprint: null,
        result: null,
        result_text: null,
        settled_attempt: null,
        error: null,
        dead_lettered: null,
        reason: null,
        dead_letter_reason: null,
      });
      const after = await mustGetOperation(admin, ticket.tenant, ticket.key);
      expect(after.row_text).toBe(before.row_text);
      expect(after.fingerprint).toBe(ticket.fingerprint);
      const audit = await auditTrail(admin, ticket.tenant, ticket.key);
      expect(audit.at(-1)).toMatchObject({ event: 'claim', outcome: 'conflict', detail: { conflict_on: [part] } });
    });
  }

  it('conflict while in flight discloses no part to another binding and never opens an attempt', async () => {
    const app = await db.app();
    const admin = await db.connect();
    const op = newOperation('conflict-all');
    await acquire(app, op);
    const row = await claim(app, {
      ...op,
      request: { other: true },
      principal: 'p2',
      scopes: [],
      binding_generation: 7,
    });
    expect(row.outcome).toBe('conflict');
    expect(row.conflict_on).toEqual(['binding']);
    // The same binding learns that its request changed.
    expect((await claim(app, { ...op, request: { other: true } })).conflict_on).toEqual(['request']);
    expect((await mustGetOperation(admin, op.tenant as string, op.key as string)).attempt).toBe(1);
  });

  it('canonical fingerprint: {"a":10.50,"b":1} and {"b":1,"a":10.5} join the same operation', async () => {
    const app = await db.app();
    const op = newOperation('canonical', { request: new JsonText('{"a":10.50,"b":1}') });
    const first = await claim(app, op);
    const second = await claim(app, { ...op, request: new JsonText('{"b":1,"a":10.5}') });
    expect(first.outcome).toBe('acquired');
    expect(second.outcome).toBe('in_progress');
    const admin = await db.connect();
    const stored = await mustGetOperation(admin, op.tenant as string, op.key as string);
    expect(stored.fingerprint).toBe(first.fingerprint);
    expect(stored.result).toBeNull();
  });

  it('settle.fingerprint, granted to settle_app, is callable by it and agrees with claim', async () => {
    const app = await db.app();
    const op = newOperation('fingerprint-fn', { request: new JsonText('{"a":10.50,"b":1}') });
    const first = await claim(app, op);
    const { rows } = await app.query<{ a: string; b: string }>(
      `select settle.fingerprint('{"a":10.50,"b":1}') as a, settle.fingerprint('{"b":1,"a":10.5}') as b`,
    );
    expect(rows[0]).toEqual({ a: first.fingerprint, b: first.fingerprint });
  });

  it('scopes: order and duplicates are ignored', async () => {
    const app = await db.app();
    const op = newOperation('scopes', { scopes: ['b', 'a', 'a'] });
    expect((await claim(app, op)).outcome).toBe('acquired');
    expect((await claim(app, { ...op, scopes: ['a', 'b'] })).outcome).toBe('in_progress');
    expect((await claim(app, { ...op, scopes: ['b', 'a', 'b', 'a'] })).outcome).toBe('in_progress');
    expect((await claim(app, { ...op, scopes: ['a'] })).conflict_on).toEqual(['binding']);
  });
});
