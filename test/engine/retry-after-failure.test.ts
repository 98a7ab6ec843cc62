import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation, storedAttempts } from './support/inspect.js';
import { supersededPair } from './support/scenarios.js';
import { acquire, complete, expireLeases, fail, heartbeat, reportUnknown } from './support/settle.js';

// retry-after-failure-settlement-lock.txt: crash -> lease expiry -> retry -> success yields
// exactly one final settlement for the winning attempt, with attempt-scoped settlement locks.
const db = useEngineDatabase('retry_after_failure');

async function settlementsOf(admin: import('pg').ClientBase, tenant: string, key: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    'select count(*)::int as n from settle.settlements where tenant = $1 and key = $2',
    [tenant, key],
  );
  return rows[0]?.n ?? 0;
}

describe('retry after failure', () => {
  it('crash, lease expiry, attempt 2 succeeds: exactly one settlement; attempt 1 is fenced; audit lists both', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const [first, second] = await supersededPair(app, admin, newOperation('crash'));
    expect(second.attempt).toBe(2);
    const whileRunning = await mustGetOperation(admin, first.tenant, first.key);
    expect(await fail(app, first, { code: 'crash' }, false)).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect(await reportUnknown(app, first)).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect(await heartbeat(app, first)).toMatchObject({ outcome: 'fenced', reason: 'superseded' });
    expect((await mustGetOperation(admin, first.tenant, first.key)).row_text).toBe(whileRunning.row_text);

    expect(await complete(app, second, { receipt: 'r-2' })).toMatchObject({
      outcome: 'settled',
      reason: 'current_attempt',
      settled_attempt: 2,
    });

    expect(await settlementsOf(admin, second.tenant, second.key)).toBe(1);
    const attempts = await storedAttempts(admin, second.tenant, second.key);
    expect(attempts.map((a) => [a.attempt, a.settled, a.end_reason])).toEqual([
      [1, false, 'lease_expired'],
      [2, true, 'observed'],
    ]);

    const before = await mustGetOperation(admin, first.tenant, first.key);
    expect(await heartbeat(app, first)).toMatchObject({ outcome: 'fenced', reason: 'settled' });
    expect(await reportUnknown(app, first)).toMatchObject({ outcome: 'fenced', reason: 'settled' });
    expect(await fail(app, first, { code: 'crash' }, true)).toMatchObject({ outcome: 'fenced', reason: 'settled' });
    expect(await fail(app, first, { code: 'crash' }, false)).toMatchObject({ outcome: 'fenced', reason: 'settled' });
    expect((await mustGetOperation(admin, first.tenant, first.key)).row_text).toBe(before.row_text);

    const audit = await auditTrail(admin, first.tenant, first.key);
    const acquired = audit.filter((r) => r.event === 'claim' && r.outcome === 'acquired').map((r) => r.attempt);
    expect(acquired).toEqual([1, 2]);
    expect(audit).toContainEqual(expect.objectContaining({ event: 'expire', outcome: 'expired', attempt: 1 }));
    expect(audit).toContainEqual(expect.objectContaining({ event: 'complete', outcome: 'settled', attempt: 2 }));
    expect(audit.filter((r) => r.outcome === 'fenced').map((r) => [r.event, r.attempt])).toEqual([
      ['fail', 1],
      ['report_unknown', 1],
      ['heartbeat', 1],
      ['heartbeat', 1],
      ['report_unknown', 1],
      ['fail', 1],
      ['fail', 1],
    ]);
  });

  it("attempt 1's retryable failure does not block attempt 2's success", async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('retryable');
    const first = await acquire(app, op);
    expect(await fail(app, first, { code: 'timeout_upstream' }, true)).toMatchObject({
      outcome: 'recorded',
      reason: 'retryable_failure',
      status: 'pending',
    });
    const second = await acquire(app, op);
    expect(second.attempt).toBe(2);
    expect(await complete(app, second, { receipt: 'r-2' })).toMatchObject({
      outcome: 'settled',
      status: 'completed',
      settled_attempt: 2,
    });
    expect(
      (await storedAttempts(admin, op.tenant as string, op.key as string)).map((a) => [a.observation, a.settled]),
    ).toEqual([
      ['failed', false],
      ['completed', true],
    ]);
    expect(await settlementsOf(admin, op.tenant as string, op.key as string)).toBe(1);
  });

  it('a late success of attempt 1 after attempt 2 settled is recorded as late_result and never replaces the result', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const [first, second] = await supersededPair(app, admin, newOperation('late'));
    await complete(app, second, { receipt: 'winner' });

    const late = await complete(app, first, { receipt: 'loser' });
    expect(late).toMatchObject({
      outcome: 'already_settled',
      reason: 'late_success',
      status: 'completed',
      result: { receipt: 'winner' },
      settled_attempt: 2,
    });
    expect(await complete(app, first, { receipt: 'loser' })).toMatchObject({ outcome: 'duplicate' });

    const stored = await mustGetOperation(admin, first.tenant, first.key);
    expect(stored).toMatchObject({ result: { receipt: 'winner' }, settled_attempt: 2 });
    const attempts = await storedAttempts(admin, first.tenant, first.key);
    expect(attempts.map((a) => [a.attempt, a.observation, a.settled, a.late_result])).toEqual([
      [1, 'completed', false, { receipt: 'loser' }],
      [2, 'completed', true, null],
    ]);
    expect(await settlementsOf(admin, first.tenant, first.key)).toBe(1);
  });

  it('a late success of the latest attempt after it released its lease settles (lease_released), also after the sweeper', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    // Order B: the caller timed out and reported unknown (the lease is released), then the
    // effect's success arrives: no other attempt exists, so it is not "superseded".
    const first = await acquire(app, newOperation('released-late'));
    expect(await reportUnknown(app, first)).toMatchObject({ outcome: 'recorded', status: 'unknown' });
    expect(await complete(app, first, { receipt: 'late' })).toMatchObject({
      outcome: 'settled',
      reason: 'lease_released',
      settled_attempt: 1,
    });
    // The sweeper ended a lapsed lease and nobody claimed since: the same answer.
    const swept = await acquire(app, newOperation('swept-late'));
    await expireLease(admin, swept.tenant, swept.key);
    expect((await expireLeases(admin)).expired).toBeGreaterThanOrEqual(1);
    expect((await mustGetOperation(admin, swept.tenant, swept.key)).lease_token).toBeNull();
    expect(await complete(app, swept, { receipt: 'late' })).toMatchObject({
      outcome: 'settled',
      reason: 'lease_released',
      settled_attempt: 1,
    });
  });

  it('a late success of a superseded attempt before the current one settles does settle (superseded_attempt)', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const [first, second] = await supersededPair(app, admin, newOperation('superseded-wins'));

    expect(await complete(app, first, { receipt: 'first' })).toMatchObject({
      outcome: 'settled',
      reason: 'superseded_attempt',
      settled_attempt: 1,
    });
    expect(await complete(app, second, { receipt: 'second' })).toMatchObject({
      outcome: 'already_settled',
      reason: 'late_success',
      result: { receipt: 'first' },
    });
    expect(await heartbeat(app, second)).toMatchObject({ outcome: 'fenced', reason: 'settled' });

    const attempts = await storedAttempts(admin, first.tenant, first.key);
    expect(attempts.map((a) => [a.attempt, a.settled, a.end_reason])).toEqual([
      [1, true, 'lease_expired'],
      [2, false, 'settled_elsewhere'],
    ]);
    expect(await mustGetOperation(admin, first.tenant, first.key)).toMatchObject({
      status: 'completed',
      result: { receipt: 'first' },
    });
  });
});
