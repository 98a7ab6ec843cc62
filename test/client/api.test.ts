import { describe, expect, it } from 'vitest';
import type { AttemptHandle, ClaimInput, ClaimOutcome } from '../../src/index.js';
import { expireLease } from '../../src/testing/clock.js';
import { binding, useClientTest, uniqueKey } from './helpers.js';

const t = useClientTest('client_api');

const tenant = 'acme';
const input = (key: string, extra: Partial<ClaimInput> = {}): ClaimInput => ({
  tenant,
  key,
  request: { amount: '10.50', to: 'bob' },
  binding,
  ...extra,
});

function acquired(outcome: ClaimOutcome): AttemptHandle {
  if (outcome.outcome !== 'acquired') throw new Error(`expected acquired, got ${outcome.outcome}`);
  return outcome.attempt;
}

describe('claim()', () => {
  it('acquired: returns a handle with the database fingerprint and the binding', async () => {
    const key = uniqueKey();
    const handle = acquired(await t.app.claim(input(key, { worker: 'w1' })));
    expect(handle).toMatchObject({
      tenant,
      key,
      attempt: 1,
      binding: { principal: 'alice', scopes: ['payments:write'], generation: 7n },
    });
    expect(handle.fingerprint).toMatch(/^v1:[0-9a-f]{64}$/);
    expect(handle.leaseExpiresAt).toBeInstanceOf(Date);
    const fingerprint = await t.su.query<{ fp: string }>('select settle.fingerprint($1::jsonb) as fp', [
      JSON.stringify({ amount: '10.50', to: 'bob' }),
    ]);
    expect(handle.fingerprint).toBe(fingerprint.rows[0]?.fp);
  });

  it('in_progress: another live lease holds the operation', async () => {
    const key = uniqueKey();
    acquired(await t.app.claim(input(key)));
    const second = await t.app.claim(input(key));
    expect(second).toMatchObject({ outcome: 'in_progress', status: 'running', attempt: 1 });
    if (second.outcome !== 'in_progress') throw new Error('unreachable');
    expect(second.retryAfterMs).toBeGreaterThan(0);
    expect(second.leaseExpiresAt).toBeInstanceOf(Date);
  });

  it('replay: a completed operation returns its stored result', async () => {
    const key = uniqueKey();
    const handle = acquired(await t.app.claim(input(key)));
    await t.app.complete(handle, { receipt: 'r-1' });
    expect(await t.app.claim(input(key))).toEqual({
      outcome: 'replay',
      result: { receipt: 'r-1' },
      settledAttempt: 1,
      attempt: 1,
    });
  });

  it('failed: a final failure and a dead letter', async () => {
    const finalKey = uniqueKey();
    await t.app.fail(acquired(await t.app.claim(input(finalKey))), { code: 'declined' }, { retryable: false });
    expect(await t.app.claim(input(finalKey))).toEqual({
      outcome: 'failed',
      error: { code: 'declined' },
      deadLettered: false,
      deadLetterReason: null,
      attempt: 1,
    });

    const deadKey = uniqueKey();
    await t.app.fail(acquired(await t.app.claim(input(deadKey, { maxAttempts: 1 }))), { code: 'flaky' });
    expect(await t.app.claim(input(deadKey))).toEqual({
      outcome: 'failed',
      error: { code: 'flaky' },
      deadLettered: true,
      deadLetterReason: 'attempts_exhausted',
      attempt: 1,
    });
  });

  it.each([
    ['request', 'request', { request: { amount: '99' } }],
    // Another binding learns only that it differs.
    ['principal', 'binding', { binding: { ...binding, principal: 'mallory' } }],
    ['scopes', 'binding', { binding: { ...binding, scopes: ['admin'] } }],
    ['binding_generation', 'binding', { binding: { ...binding, generation: 8n } }],
  ] as const)('conflict on %s', async (_part, field, change) => {
    const key = uniqueKey();
    acquired(await t.app.claim(input(key)));
    expect(await t.app.claim(input(key, change))).toEqual({ outcome: 'conflict', conflictOn: [field] });
  });

  it('scope order and duplicates do not matter', async () => {
    const key = uniqueKey();
    acquired(await t.app.claim(input(key, { binding: { ...binding, scopes: ['b', 'a'] } })));
    expect((await t.app.claim(input(key, { binding: { ...binding, scopes: ['a', 'b', 'a'] } }))).outcome).toBe(
      'in_progress',
    );
  });

  it('in_doubt with rerunAfterUnknown: false after a reported unknown: typed, nothing opened; the default opens attempt 2', async () => {
    const key = uniqueKey();
    await t.app.reportUnknown(acquired(await t.app.claim(input(key))));
    for (let i = 0; i < 3; i++) {
      expect(await t.app.claim(input(key, { rerunAfterUnknown: false }))).toEqual({
        outcome: 'in_doubt',
        status: 'unknown',
        attempt: 1,
        deadLettered: false,
      });
    }
    expect(acquired(await t.app.claim(input(key))).attempt).toBe(2);
    // A crashed attempt (lapsed lease, nothing reported) on a fresh key is still taken over.
    const crashed = uniqueKey();
    acquired(await t.app.claim(input(crashed)));
    await expireLease(t.su, tenant, crashed);
    expect(acquired(await t.app.claim(input(crashed, { rerunAfterUnknown: false }))).attempt).toBe(2);
  });

  it('takes over a lapsed lease as the next attempt', async () => {
    const key = uniqueKey();
    acquired(await t.app.claim(input(key)));
    await expireLease(t.su, tenant, key);
    expect(acquired(await t.app.claim(input(key))).attempt).toBe(2);
  });
});

describe('heartbeat()', () => {
  it('extended, then fenced: superseded, lease_released, settled, invalid_token', async () => {
    const key = uniqueKey();
    const first = acquired(await t.app.claim(input(key)));
    const extended = await t.app.heartbeat(first, { leaseMs: 60_000 });
    expect(extended).toMatchObject({ outcome: 'extended', status: 'running' });
    if (extended.outcome !== 'extended') throw new Error('unreachable');
    expect(extended.leaseExpiresAt.getTime()).toBeGreaterThan(first.leaseExpiresAt.getTime());

    await expireLease(t.su, tenant, key);
    const second = acquired(await t.app.claim(input(key)));
    expect(await t.app.heartbeat(first)).toEqual({ outcome: 'fenced', reason: 'superseded', status: 'running' });

    await t.app.reportUnknown(second);
    expect(await t.app.heartbeat(second)).toEqual({ outcome: 'fenced', reason: 'lease_released', status: 'unknown' });

    const third = acquired(await t.app.claim(input(key)));
    await t.app.complete(third, 'done');
    expect(await t.app.heartbeat(third)).toEqual({ outcome: 'fenced', reason: 'settled', status: 'completed' });

    const forged = { ...third, leaseToken: '00000000-0000-4000-8000-000000000000' };
    expect(await t.app.heartbeat(forged)).toEqual({ outcome: 'fenced', reason: 'invalid_token', status: null });
  });
});

describe('complete()', () => {
  it('settled (current attempt), then duplicate', async () => {
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    const settled = await t.app.complete(handle, { ok: 1 });
    expect(settled).toEqual({
      outcome: 'settled',
      reason: 'current_attempt',
      status: 'completed',
      attempt: 1,
      settledAttempt: 1,
      result: { ok: 1 },
      error: null,
      deadLettered: false,
      deadLetterReason: null,
    });
    expect(await t.app.complete(handle, { ok: 1 })).toMatchObject({
      outcome: 'duplicate',
      reason: null,
      status: 'completed',
    });
  });

  it('settled by a superseded attempt, then late success is already_settled with the canonical result', async () => {
    const key = uniqueKey();
    const first = acquired(await t.app.claim(input(key)));
    await expireLease(t.su, tenant, key);
    const second = acquired(await t.app.claim(input(key)));
    expect(await t.app.complete(first, 'first')).toMatchObject({
      outcome: 'settled',
      reason: 'superseded_attempt',
      settledAttempt: 1,
    });
    expect(await t.app.complete(second, 'second')).toMatchObject({
      outcome: 'already_settled',
      reason: 'late_success',
      status: 'completed',
      result: 'first',
    });
  });

  it('already_settled (attempt_already_observed) after this attempt failed', async () => {
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    await t.app.fail(handle, { code: 'x' }, { retryable: false });
    expect(await t.app.complete(handle, 'late')).toMatchObject({
      outcome: 'already_settled',
      reason: 'attempt_already_observed',
    });
  });

  it('conflict when the handle presents another binding; fenced invalid_token with a forged token', async () => {
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    const other = { ...handle, binding: { ...handle.binding, generation: 99n } };
    expect(await t.app.complete(other, 'x')).toEqual({
      outcome: 'conflict',
      reason: 'lock_mismatch',
      conflictOn: ['binding'],
    });
    expect((await t.admin.inspect(handle))?.status).toBe('conflict');
    const forged = { ...handle, leaseToken: '00000000-0000-4000-8000-000000000000' };
    expect(await t.app.complete(forged, 'x')).toEqual({ outcome: 'fenced', reason: 'invalid_token' });
  });
});

describe('fail()', () => {
  it('recorded (retryable), settled (final_failure, attempts_exhausted), duplicate', async () => {
    const key = uniqueKey();
    const first = acquired(await t.app.claim(input(key, { maxAttempts: 2 })));
    expect(await t.app.fail(first, { code: 'timeout' })).toMatchObject({
      outcome: 'recorded',
      reason: 'retryable_failure',
      status: 'pending',
    });
    expect(await t.app.fail(first, { code: 'timeout' })).toMatchObject({ outcome: 'duplicate' });
    const second = acquired(await t.app.claim(input(key)));
    expect(await t.app.fail(second, { code: 'timeout' })).toMatchObject({
      outcome: 'settled',
      reason: 'attempts_exhausted',
      status: 'failed',
      error: { code: 'timeout' },
    });

    const other = acquired(await t.app.claim(input(uniqueKey())));
    expect(await t.app.fail(other, { code: 'declined' }, { retryable: false })).toMatchObject({
      outcome: 'settled',
      reason: 'final_failure',
    });
  });

  it('fenced when the attempt no longer holds the lease', async () => {
    const key = uniqueKey();
    const first = acquired(await t.app.claim(input(key)));
    await expireLease(t.su, tenant, key);
    const second = acquired(await t.app.claim(input(key)));
    expect(await t.app.fail(first, { code: 'late' })).toMatchObject({
      outcome: 'fenced',
      reason: 'superseded',
      status: 'running',
    });
    await t.app.complete(second, 'ok');
    const stale = acquired(await t.app.claim(input(uniqueKey())));
    await t.app.reportUnknown(stale);
    expect(await t.app.fail(stale, { code: 'late' })).toMatchObject({ outcome: 'fenced', reason: 'lease_released' });
  });
});

describe('reportUnknown()', () => {
  it('recorded, then a success of the same attempt still settles; unknown after success is already_settled', async () => {
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    expect(await t.app.reportUnknown(handle)).toMatchObject({
      outcome: 'recorded',
      reason: 'outcome_unknown',
      status: 'unknown',
    });
    expect(await t.app.complete(handle, 'ok')).toMatchObject({ outcome: 'settled', status: 'completed' });
    expect(await t.app.reportUnknown(handle)).toMatchObject({
      outcome: 'already_settled',
      status: 'completed',
      result: 'ok',
    });
  });

  it('fenced when superseded', async () => {
    const key = uniqueKey();
    const first = acquired(await t.app.claim(input(key)));
    await expireLease(t.su, tenant, key);
    acquired(await t.app.claim(input(key)));
    expect(await t.app.reportUnknown(first)).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
  });
});

describe('get() and inspect()', () => {
  it('get is gated by the lock: not_found, found for the holder, conflict for another binding', async () => {
    expect(await t.app.get(input(uniqueKey()))).toEqual({ outcome: 'not_found' });
    const key = uniqueKey();
    const handle = acquired(await t.app.claim(input(key)));
    expect(await t.app.get(input(key))).toMatchObject({
      outcome: 'found',
      reason: null,
      status: 'running',
      attempt: 1,
      inFlight: true,
      result: null,
    });
    const stranger = { ...input(key), binding: { ...input(key).binding, principal: 'mallory' } };
    expect(await t.app.get(stranger)).toEqual({ outcome: 'conflict', conflictOn: ['binding'] });
    await t.app.complete(handle, { ok: 1 });
    expect(await t.app.get(input(key))).toMatchObject({
      outcome: 'found',
      status: 'completed',
      result: { ok: 1 },
      settledAttempt: 1,
    });
  });

  it('inspect: null for an unknown key, the whole canonical record otherwise (settle_admin)', async () => {
    expect(await t.admin.inspect({ tenant, key: uniqueKey() })).toBeNull();
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    const record = await t.admin.inspect(handle);
    expect(record).toMatchObject({
      tenant,
      key: handle.key,
      status: 'running',
      inFlight: true,
      bindingGeneration: 7n,
      scopes: ['payments:write'],
    });
    expect(record?.createdAt).toBeInstanceOf(Date);
  });

  it('another tenant does not see the operation', async () => {
    const handle = acquired(await t.app.claim(input(uniqueKey())));
    expect(await t.admin.inspect({ tenant: 'other', key: handle.key })).toBeNull();
  });
});

describe('admin', () => {
  it('expireLeases, deadLetters, redrive, purge, stats, attempts, auditLog', async () => {
    const admTenant = `adm-${uniqueKey('t').slice(0, 20)}`;
    const key = uniqueKey();
    const handle = acquired(await t.app.claim({ ...input(key), tenant: admTenant, maxAttempts: 1 }));
    await expireLease(t.su, admTenant, key);
    expect(await t.admin.expireLeases({ batchSize: 1000 })).toMatchObject({
      expired: expect.any(Number),
      deadLettered: expect.any(Number),
    });
    expect((await t.admin.inspect({ tenant: admTenant, key }))?.deadLetteredAt).toBeInstanceOf(Date);
    expect((await t.admin.deadLetters({ limit: 1000 })).some((d) => d.key === key)).toBe(true);

    const redriven = await t.admin.redrive({ tenant: admTenant, key, additionalAttempts: 2, reason: 'fixed upstream' });
    // Its only attempt's lease lapsed: it may have taken effect, so the dead letter needs
    // reconciliation and redrive keeps it unknown (never back to pending).
    expect(redriven).toMatchObject({ status: 'unknown', redriveCount: 1, maxAttempts: 3 });
    const again = acquired(await t.app.claim({ ...input(key), tenant: admTenant }));
    expect(again.attempt).toBe(2);
    await t.app.complete(again, 'ok');

    const stats = (await t.admin.stats()).find((row) => row.tenant === admTenant);
    expect(stats).toMatchObject({ operations: 1n, completed: 1n, attempts: 2n });

    const attempts = await t.admin.attempts({ tenant: admTenant, key });
    expect(attempts.map((a) => [a.attempt, a.endReason, a.settled])).toEqual([
      [1, 'exhausted', false],
      [2, 'observed', true],
    ]);
    const audit = await t.admin.auditLog({ tenant: admTenant, key });
    expect(audit.map((a) => a.event)).toEqual(['claim', 'expire', 'redrive', 'claim', 'complete']);
    expect(typeof audit[0]?.auditId).toBe('bigint');
    expect(handle.attempt).toBe(1);

    expect(await t.admin.purge({ olderThanMs: 0, batchSize: 100_000 })).toBeGreaterThanOrEqual(1);
    expect(await t.admin.inspect({ tenant: admTenant, key })).toBeNull();
  });
});
