import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { secondWaitsForFirst } from './support/barrier.js';
import { asAdmin, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation } from './support/inspect.js';
import { acquire, claim, complete, expireLeases, fail, redrive, type ClaimArgs } from './support/settle.js';

const db = useEngineDatabase('attempt_budget');

/** An operation with max_attempts 1 whose only attempt failed retryably: dead-lettered. */
async function deadLetter(prefix: string): Promise<ClaimArgs> {
  const app = await db.app();
  const op = newOperation(prefix, { max_attempts: 1 });
  const ticket = await acquire(app, op);
  expect(await fail(app, ticket, { code: 'upstream_down' }, true)).toMatchObject({
    outcome: 'settled',
    reason: 'attempts_exhausted',
  });
  return op;
}

describe('attempt budget', () => {
  it('a retryable failure of the last allowed attempt dead-letters the operation', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('budget-fail', { max_attempts: 2 });
    const first = await acquire(app, op);
    expect(await fail(app, first, { code: 'e1' }, true)).toMatchObject({ outcome: 'recorded' });
    const second = await acquire(app, op);
    expect(await fail(app, second, { code: 'e2' }, true)).toMatchObject({
      outcome: 'settled',
      reason: 'attempts_exhausted',
      status: 'failed',
      error: { code: 'e2' },
    });
    expect(await claim(app, op)).toMatchObject({ outcome: 'failed', dead_lettered: true, error: { code: 'e2' } });
    const stored = await mustGetOperation(admin, op.tenant as string, op.key as string);
    expect(stored.status).toBe('failed');
    expect(stored.dead_lettered_at).not.toBeNull();
    expect(stored.attempt).toBe(2);
  });

  it('a lapsed lease of the last allowed attempt dead-letters on the next claim: unknown, needs_reconciliation (never failed)', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('budget-lapse', { max_attempts: 1 });
    await acquire(app, op);
    await expireLease(admin, op.tenant as string, op.key as string);
    expect(await claim(app, op)).toMatchObject({
      outcome: 'unknown',
      status: 'unknown',
      dead_lettered: true,
      attempt: 1,
      error: null,
      dead_letter_reason: 'needs_reconciliation',
      lease_token: null,
    });
    const audit = await auditTrail(admin, op.tenant as string, op.key as string);
    expect(audit).toContainEqual(
      expect.objectContaining({
        event: 'expire',
        outcome: 'dead_lettered',
        status_after: 'unknown',
        detail: expect.objectContaining({ dead_letter_reason: 'needs_reconciliation' }),
      }),
    );
  });

  it('settle.expire_leases dead-letters a lapsed last attempt', async () => {
    const admin = await db.connect();
    const app = await db.app();
    const op = newOperation('budget-sweep', { max_attempts: 1 });
    await acquire(app, op);
    await expireLease(admin, op.tenant as string, op.key as string);
    await asAdmin(admin);
    const swept = await expireLeases(admin);
    expect(swept.dead_lettered).toBeGreaterThanOrEqual(1);
    expect(swept.expired).toBeGreaterThanOrEqual(swept.dead_lettered);
    const { rows } = await admin.query('select * from settle.dead_letters where tenant = $1 and key = $2', [
      op.tenant,
      op.key,
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      attempt: 1,
      max_attempts: 1,
      error: null,
      reason: 'needs_reconciliation',
      status: 'unknown',
    });
  });
});

describe('settle.redrive', () => {
  it('re-opens a dead letter (pending, redrive_count 1) and a new attempt can settle', async () => {
    const op = await deadLetter('redrive');
    const [app, maintenance, admin] = await Promise.all([db.app(), db.connect(), db.connect()]);
    await asAdmin(maintenance);
    const reopened = await redrive(maintenance, {
      tenant: op.tenant as string,
      key: op.key as string,
      reason: 'upstream back',
    });
    expect(reopened).toMatchObject({
      status: 'pending',
      redrive_count: 1,
      max_attempts: 2,
      dead_lettered_at: null,
      error: null,
    });

    const ticket = await acquire(app, op);
    expect(ticket.attempt).toBe(2);
    expect(await complete(app, ticket, { receipt: 'after-redrive' })).toMatchObject({
      outcome: 'settled',
      status: 'completed',
      settled_attempt: 2,
    });
    const audit = await auditTrail(admin, op.tenant as string, op.key as string);
    expect(audit).toContainEqual(
      expect.objectContaining({
        event: 'redrive',
        status_before: 'failed',
        status_after: 'pending',
        detail: expect.objectContaining({ previous_error: { code: 'upstream_down' }, reason: 'upstream back' }),
      }),
    );
  });

  it('refuses a modified request (SE012) and keeps the dead letter', async () => {
    const op = await deadLetter('redrive-modified');
    const admin = await db.connect();
    await asAdmin(admin);
    const args = { tenant: op.tenant as string, key: op.key as string };
    expect(await sqlStateOf(redrive(admin, { ...args, request: { amount: '1000000.00' } }))).toBe('SE012');
    await admin.query('reset role');
    expect(await mustGetOperation(admin, args.tenant, args.key)).toMatchObject({ status: 'failed', redrive_count: 0 });
    // The reserved request itself is accepted.
    expect(await redrive(admin, { ...args, request: op.request })).toMatchObject({
      status: 'pending',
      redrive_count: 1,
    });
  });

  it('refuses an operation that is not dead-lettered (SE011)', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const running = newOperation('redrive-running');
    await acquire(app, running);
    const finalFailure = newOperation('redrive-final');
    await fail(app, await acquire(app, finalFailure), { code: 'declined' }, false);
    await asAdmin(admin);
    expect(await sqlStateOf(redrive(admin, { tenant: running.tenant as string, key: running.key as string }))).toBe(
      'SE011',
    );
    expect(
      await sqlStateOf(redrive(admin, { tenant: finalFailure.tenant as string, key: finalFailure.key as string })),
    ).toBe('SE011');
  });

  it('two concurrent redrives: exactly one re-opens, the other gets SE011', async () => {
    const op = await deadLetter('redrive-race');
    const [one, two, observer] = await Promise.all([db.connect(), db.connect(), db.connect()]);
    await Promise.all([asAdmin(one), asAdmin(two)]);
    const args = { tenant: op.tenant as string, key: op.key as string };
    const [first, second] = await secondWaitsForFirst(
      { one, two, observer },
      (c) => redrive(c, args),
      (c) => sqlStateOf(redrive(c, args)),
    );
    expect(first).toMatchObject({ status: 'pending', redrive_count: 1 });
    expect(second).toBe('SE011');
    expect(await mustGetOperation(observer, args.tenant, args.key)).toMatchObject({
      status: 'pending',
      redrive_count: 1,
    });
  });
});
