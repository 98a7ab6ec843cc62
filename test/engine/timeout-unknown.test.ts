import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { secondWaitsForFirst } from './support/barrier.js';
import { asAdmin, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation } from './support/inspect.js';
import { acquire, claim, complete, expireLeases, fail, redrive, reportUnknown } from './support/settle.js';

// Timeout means unknown, not failure: `failed` is a committed failure only.
// When the attempt budget is spent and an attempt may have taken effect, the operation stays
// unknown, dead-lettered with reason needs_reconciliation; a matching success still settles it.
const db = useEngineDatabase('timeout_unknown');

async function sessions() {
  const [one, two, observer, admin] = await Promise.all([db.app(), db.app(), db.connect(), db.connect()]);
  return { one, two, observer, admin };
}

async function deadLetterRow(admin: import('pg').ClientBase, tenant: string, key: string) {
  const { rows } = await admin.query('select * from settle.dead_letters where tenant = $1 and key = $2', [tenant, key]);
  return rows[0] as Record<string, unknown> | undefined;
}

describe('an attempt budget spent on timeouts stays unknown', () => {
  it('report_unknown of the only attempt, then claim: unknown, needs_reconciliation, never failed', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('issue-e3', { max_attempts: 1 });
    const ticket = await acquire(app, op);
    // The observation row says it all: the client needs no extra read.
    expect(await reportUnknown(app, ticket)).toMatchObject({
      outcome: 'recorded',
      reason: 'outcome_unknown',
      status: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
    });
    expect(await claim(app, op)).toMatchObject({
      outcome: 'unknown',
      status: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
      error: null,
      lease_token: null,
      result: null,
    });
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'unknown',
      dead_letter_reason: 'needs_reconciliation',
    });
    expect(await deadLetterRow(admin, ticket.tenant, ticket.key)).toMatchObject({
      reason: 'needs_reconciliation',
      status: 'unknown',
    });
  });

  it('unknown, then the last attempt fails retryably: recorded needs_reconciliation (an earlier attempt may have charged)', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('mixed', { max_attempts: 2 });
    const first = await acquire(app, op);
    expect(await reportUnknown(app, first)).toMatchObject({
      outcome: 'recorded',
      dead_lettered: false,
      dead_letter_reason: null,
    });
    const second = await acquire(app, op);
    expect(await fail(app, second, { code: 'declined_upstream' }, true)).toMatchObject({
      outcome: 'recorded',
      reason: 'needs_reconciliation',
      status: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
    });
    expect(await claim(app, op)).toMatchObject({ outcome: 'unknown', dead_letter_reason: 'needs_reconciliation' });
    // A matching success of the attempt that lost its response still settles it.
    expect(await complete(app, first, { receipt: 'it-did-happen' })).toMatchObject({
      outcome: 'settled',
      status: 'completed',
      settled_attempt: 1,
      dead_lettered: false,
      dead_letter_reason: null,
    });
    expect(await deadLetterRow(admin, op.tenant as string, op.key as string)).toBeUndefined();
    expect(await claim(app, op)).toMatchObject({ outcome: 'replay', result: { receipt: 'it-did-happen' } });
  });

  it('every attempt failed: failed, attempts_exhausted (the all-failures case keeps failed)', async () => {
    const app = await db.app();
    const op = newOperation('all-failed', { max_attempts: 2 });
    expect(await fail(app, await acquire(app, op), { code: 'e1' }, true)).toMatchObject({
      outcome: 'recorded',
      reason: 'retryable_failure',
    });
    expect(await fail(app, await acquire(app, op), { code: 'e2' }, true)).toMatchObject({
      outcome: 'settled',
      reason: 'attempts_exhausted',
      status: 'failed',
      dead_lettered: true,
      dead_letter_reason: 'attempts_exhausted',
    });
    expect(await claim(app, op)).toMatchObject({
      outcome: 'failed',
      dead_letter_reason: 'attempts_exhausted',
      error: { code: 'e2' },
    });
  });

  it('a final failure after an unknown attempt is recorded, the operation stays unknown until a matching success', async () => {
    const app = await db.app();
    const op = newOperation('final-after-unknown', { max_attempts: 3 });
    const first = await acquire(app, op);
    await reportUnknown(app, first);
    expect(await fail(app, await acquire(app, op), { code: 'card_closed' }, false)).toMatchObject({
      outcome: 'recorded',
      reason: 'needs_reconciliation',
      status: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
    });
    // Claims and reads never say `failed`: the caller must not issue the effect again.
    expect(await claim(app, op)).toMatchObject({
      outcome: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
    });
    // The first attempt did charge: its success is the truth.
    expect(await complete(app, first, { charge: 'ch_1' })).toMatchObject({ outcome: 'settled', status: 'completed' });
    expect(await claim(app, op)).toMatchObject({ outcome: 'replay', result: { charge: 'ch_1' } });
  });

  it('a final failure after a lapsed attempt (a crashed worker may have charged) is not `failed`', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('final-after-lapse', { max_attempts: 3 });
    const first = await acquire(app, op);
    await expireLease(admin, first.tenant, first.key);
    expect(await fail(app, await acquire(app, op), { code: 'card_closed' }, false)).toMatchObject({
      outcome: 'recorded',
      reason: 'needs_reconciliation',
      status: 'unknown',
      dead_letter_reason: 'needs_reconciliation',
    });
  });

  it('a final failure when every earlier attempt recorded a failure is a committed failure', async () => {
    const app = await db.app();
    const op = newOperation('final-after-failures', { max_attempts: 3 });
    await fail(app, await acquire(app, op), { code: 'timeout_before_send' }, true);
    expect(await fail(app, await acquire(app, op), { code: 'card_closed' }, false)).toMatchObject({
      outcome: 'settled',
      reason: 'final_failure',
      status: 'failed',
      dead_lettered: false,
      dead_letter_reason: null,
    });
  });

  it('a conflicting success on the last attempt: dead-lettered by the sweeper as needs_reconciliation, status kept at conflict', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('conflict-last', { max_attempts: 1 });
    const ticket = await acquire(app, op);
    expect(await complete(app, { ...ticket, binding_generation: 9 }, { other: true })).toMatchObject({
      outcome: 'conflict',
    });
    await asAdmin(admin);
    await expireLeases(admin);
    expect(await deadLetterRow(admin, ticket.tenant, ticket.key)).toMatchObject({
      reason: 'needs_reconciliation',
      status: 'conflict',
    });
  });

  it('redrive of a needs_reconciliation dead letter never lowers it below unknown; the next attempt runs under unknown', async () => {
    const [app, maintenance, admin] = await Promise.all([db.app(), db.connect(), db.connect()]);
    const op = newOperation('redrive-unknown', { max_attempts: 1 });
    await reportUnknown(app, await acquire(app, op));
    await asAdmin(maintenance);
    expect(
      await redrive(maintenance, {
        tenant: op.tenant as string,
        key: op.key as string,
        reason: 'checked: not charged',
      }),
    ).toMatchObject({
      status: 'unknown',
      dead_lettered_at: null,
      dead_letter_reason: null,
      redrive_count: 1,
      max_attempts: 2,
    });
    const next = await acquire(app, op);
    expect(next.attempt).toBe(2);
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({ status: 'unknown' });
    const audit = await auditTrail(admin, op.tenant as string, op.key as string);
    expect(audit).toContainEqual(
      expect.objectContaining({
        event: 'redrive',
        status_before: 'unknown',
        status_after: 'unknown',
        detail: expect.objectContaining({ dead_letter_reason: 'needs_reconciliation' }),
      }),
    );
  });

  it('the guards hold every writer to it: no superuser update turns needs_reconciliation into failed, or back to pending', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('guarded', { max_attempts: 1 });
    await reportUnknown(app, await acquire(app, op));
    const where = 'where tenant = $1 and key = $2';
    const args = [op.tenant, op.key];
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.operations set status = 'failed', error = '{}', dead_letter_reason = 'attempts_exhausted' ${where}`,
          args,
        ),
      ),
    ).toBe('SE021');
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.operations set status = 'pending', dead_lettered_at = null, dead_letter_reason = null, redrive_count = 1 ${where}`,
          args,
        ),
      ),
    ).toBe('SE021');
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({
      status: 'unknown',
      dead_letter_reason: 'needs_reconciliation',
    });
  });

  it('settle.stats separates failed from needs_reconciliation', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const tenant = `stats-${Date.now()}`;
    await reportUnknown(app, await acquire(app, newOperation('s1', { tenant, max_attempts: 1 })));
    await fail(app, await acquire(app, newOperation('s2', { tenant, max_attempts: 1 })), { code: 'x' }, true);
    const { rows } = await admin.query('select * from settle.stats where tenant = $1', [tenant]);
    expect(rows[0]).toMatchObject({ failed: '1', unknown: '1', dead_lettered: '2', needs_reconciliation: '1' });
  });
});

describe('racing connections at the end of the budget', () => {
  it('the sweeper dead-letters the lapsed last attempt while its late success waits on the row lock: the success settles', async () => {
    const s = await sessions();
    const op = newOperation('race-sweep-first', { max_attempts: 1 });
    const ticket = await acquire(s.one, op);
    await expireLease(s.admin, ticket.tenant, ticket.key);
    const maintenance = await db.connect();
    await asAdmin(maintenance);
    const [swept, late] = await secondWaitsForFirst(
      { one: maintenance, two: s.two, observer: s.admin },
      (one) => expireLeases(one),
      (two) => complete(two, ticket, { receipt: 'slow-worker' }),
    );
    expect(swept.dead_lettered).toBeGreaterThanOrEqual(1);
    expect(late).toMatchObject({
      outcome: 'settled',
      reason: 'lease_released',
      status: 'completed',
      dead_lettered: false,
    });
    expect(await mustGetOperation(s.admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'completed',
      dead_lettered_at: null,
    });
  });

  it('the sweeper runs while the late success holds the row: it skips the row (SKIP LOCKED), the success settles, nothing is dead-lettered', async () => {
    const s = await sessions();
    const op = newOperation('race-success-first', { max_attempts: 1 });
    const ticket = await acquire(s.one, op);
    await expireLease(s.admin, ticket.tenant, ticket.key);
    const maintenance = await db.connect();
    await asAdmin(maintenance);
    await s.one.query('begin');
    try {
      expect(await complete(s.one, ticket, { receipt: 'first' })).toMatchObject({ outcome: 'settled' });
      await expireLeases(maintenance); // does not wait for the locked row, does not touch it
      await s.one.query('commit');
    } catch (error) {
      await s.one.query('rollback');
      throw error;
    }
    await expireLeases(maintenance);
    expect(await mustGetOperation(s.admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'completed',
      dead_lettered_at: null,
    });
    expect(await deadLetterRow(s.admin, ticket.tenant, ticket.key)).toBeUndefined();
  });

  it('the last attempt reports unknown while a retry of the first attempt completes: either order ends completed', async () => {
    for (const unknownFirst of [true, false]) {
      const s = await sessions();
      const op = newOperation(`race-unknown-${unknownFirst}`, { max_attempts: 2 });
      const first = await acquire(s.one, op);
      await expireLease(s.admin, first.tenant, first.key);
      const second = await acquire(s.one, op);
      const [a, b] = unknownFirst
        ? await secondWaitsForFirst(
            s,
            (one) => reportUnknown(one, second),
            (two) => complete(two, first, { receipt: 'r1' }),
          )
        : await secondWaitsForFirst(
            s,
            (one) => complete(one, first, { receipt: 'r1' }),
            (two) => reportUnknown(two, second),
          );
      const [unknownAnswer, successAnswer] = unknownFirst ? [a, b] : [b, a];
      expect(successAnswer).toMatchObject({ outcome: 'settled', status: 'completed', settled_attempt: 1 });
      expect(unknownAnswer.outcome).toBe(unknownFirst ? 'recorded' : 'fenced');
      if (unknownFirst)
        expect(unknownAnswer).toMatchObject({ dead_lettered: true, dead_letter_reason: 'needs_reconciliation' });
      expect(await mustGetOperation(s.admin, op.tenant as string, op.key as string)).toMatchObject({
        status: 'completed',
        dead_lettered_at: null,
        dead_letter_reason: null,
      });
    }
  });
});
