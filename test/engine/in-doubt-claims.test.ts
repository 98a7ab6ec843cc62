import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { backendPid, holdUntilSecondWaits, waitUntilBlocked } from './support/barrier.js';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation as anyOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation, storedAttempts } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, reportUnknown, type ClaimArgs } from './support/settle.js';

// settle.claim(rerun_after_unknown => false) answers an operation whose attempt
// reported unknown with `in_doubt`: no attempt opened, no lease taken, no row changed, whichever
// process or connection retries (the HTTP middleware's instances behind a load balancer). A
// crashed attempt (lapsed lease, nothing reported) is still taken over. Real connections of a
// login granted settle_app, interleaved by locks, never by sleeping.
const db = useEngineDatabase('in_doubt_claims');
const loginRole = useLoginRoles(db);

function newOperation(prefix: string, overrides: Partial<ClaimArgs> = {}): ClaimArgs {
  return anyOperation(prefix, { principal: uniqueKey('svc'), ...overrides });
}

const answerUnknown = (op: ClaimArgs): ClaimArgs => ({ ...op, rerun_after_unknown: false });

async function sessions() {
  const role = await loginRole('svc', ['settle_app']);
  const [one, two, three] = await Promise.all([role.connect(), role.connect(), role.connect()]);
  const admin = await (await loginRole('ops', ['settle_admin'])).connect();
  const superuser = await db.connect();
  const observer = await db.connect();
  return { one, two, three, admin, superuser, observer };
}

async function attemptCount(superuser: pg.ClientBase, op: ClaimArgs): Promise<number> {
  return (await storedAttempts(superuser, op.tenant ?? '', op.key ?? '')).length;
}

async function reportedUnknown(s: Awaited<ReturnType<typeof sessions>>, op: ClaimArgs) {
  const ticket = await acquire(s.one, op);
  expect(await reportUnknown(s.one, ticket)).toMatchObject({
    outcome: 'recorded',
    reason: 'outcome_unknown',
    status: 'unknown',
  });
  return ticket;
}

describe('settle.claim(rerun_after_unknown => false)', () => {
  it('two connections retrying a reported unknown while its row is locked both answer in_doubt at once; attempts unchanged; an open claim then opens attempt 2', async () => {
    const s = await sessions();
    const op = newOperation('in-doubt-race');
    await reportedUnknown(s, op);
    const before = await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '');

    // The row is locked by another transaction: the in_doubt answer comes from a plain read,
    // so neither retry waits for it (a claim that would open an attempt would queue here).
    await s.superuser.query('begin');
    try {
      await s.superuser.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
        op.tenant,
        op.key,
      ]);
      const answers = await Promise.all([
        claim(s.two, answerUnknown(op)),
        claim(s.three, answerUnknown(op)),
        claim(s.two, answerUnknown(op)),
      ]);
      for (const a of answers) {
        expect(a).toMatchObject({
          outcome: 'in_doubt',
          status: 'unknown',
          attempt: 1,
          lease_token: null,
          lease_expires_at: null,
          dead_lettered: false,
          result: null,
          error: null,
          conflict_on: null,
        });
        expect(a.fingerprint).toMatch(/^v\d+:[0-9a-f]{64}$/);
      }
    } finally {
      await s.superuser.query('commit');
    }

    expect(await attemptCount(s.superuser, op)).toBe(1);
    const after = await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '');
    expect(after).toEqual(before);
    const inDoubt = (await auditTrail(s.admin, op.tenant ?? '', op.key ?? '')).filter((r) => r.outcome === 'in_doubt');
    expect(inDoubt).toEqual(
      Array.from({ length: 3 }, () =>
        expect.objectContaining({
          event: 'claim',
          attempt: 1,
          status_before: 'unknown',
          status_after: 'unknown',
        }),
      ),
    );

    // Racing: two in-doubt retries and one claim that asks to re-run. Exactly attempt 2 is
    // opened; each in-doubt retry answers in_doubt (read before the open committed) or
    // in_progress (after it), never acquired.
    const [a, b, open] = await Promise.all([
      claim(s.two, answerUnknown(op)),
      claim(s.three, answerUnknown(op)),
      claim(s.one, op),
    ]);
    expect(open).toMatchObject({ outcome: 'acquired', attempt: 2, status: 'unknown' });
    for (const x of [a, b]) expect(['in_doubt', 'in_progress']).toContain(x.outcome);
    expect(await attemptCount(s.superuser, op)).toBe(2);
  });

  it('a retry waiting for the row lock while the attempt reports unknown decides after the wait: in_doubt, nothing opened', async () => {
    const s = await sessions();
    const op = newOperation('in-doubt-wait');
    const ticket = await acquire(s.one, op);
    // The lease lapsed with nothing reported: the retry reads a takeover and locks the row ...
    await expireLease(s.superuser, ticket.tenant, ticket.key);
    const pid = await backendPid(s.two);
    const [reported, retried] = await holdUntilSecondWaits(
      s.one,
      s.two,
      (one) => reportUnknown(one, ticket),
      (two) => claim(two, answerUnknown(op)),
      () => waitUntilBlocked(s.observer, pid),
    );
    // ... and after the holder's report committed it decides again on what it locked.
    expect(reported).toMatchObject({ outcome: 'recorded', reason: 'outcome_unknown' });
    expect(retried).toMatchObject({ outcome: 'in_doubt', status: 'unknown', attempt: 1 });
    expect(await attemptCount(s.superuser, op)).toBe(1);
    expect(await mustGetOperation(s.superuser, ticket.tenant, ticket.key)).toMatchObject({
      status: 'unknown',
      lease_token: null,
      attempt: 1,
    });
  });

  it('a crashed attempt (lapsed lease, nothing reported) is still taken over', async () => {
    const s = await sessions();
    const op = newOperation('in-doubt-crash');
    const ticket = await acquire(s.one, op);
    await expireLease(s.superuser, ticket.tenant, ticket.key);
    expect(await claim(s.two, answerUnknown(op))).toMatchObject({ outcome: 'acquired', attempt: 2, status: 'running' });
  });

  it('a later attempt that crashed after a reported unknown: still in_doubt (an attempt reported unknown)', async () => {
    const s = await sessions();
    const op = newOperation('in-doubt-later');
    await reportedUnknown(s, op);
    const second = await acquire(s.one, op);
    expect(second.attempt).toBe(2);
    expect(await claim(s.two, answerUnknown(op))).toMatchObject({ outcome: 'in_progress', attempt: 2 });
    await expireLease(s.superuser, second.tenant, second.key);
    expect(await claim(s.two, answerUnknown(op))).toMatchObject({ outcome: 'in_doubt', status: 'unknown', attempt: 2 });
    expect(await attemptCount(s.superuser, op)).toBe(2);
  });

  it('the other answers keep their precedence: dead letter, conflict, refusal', async () => {
    const s = await sessions();
    const dead = newOperation('in-doubt-dead', { max_attempts: 1 });
    await reportedUnknown(s, dead);
    expect(await claim(s.two, answerUnknown(dead))).toMatchObject({
      outcome: 'unknown',
      dead_lettered: true,
      dead_letter_reason: 'needs_reconciliation',
    });

    const op = newOperation('in-doubt-precedence');
    await reportedUnknown(s, op);
    expect(await claim(s.two, answerUnknown({ ...op, request: { amount: '99.00' } }))).toMatchObject({
      outcome: 'conflict',
      conflict_on: ['request'],
      status: null,
      attempt: null,
    });
    await s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]);
    expect(await claim(s.two, answerUnknown(op))).toMatchObject({
      outcome: 'refused',
      reason: 'binding_revoked',
      status: null,
    });
    expect(await attemptCount(s.superuser, op)).toBe(1);
  });

  it('rerun_after_unknown NULL is SE008 and writes nothing', async () => {
    const s = await sessions();
    const op = newOperation('in-doubt-null');
    expect(await sqlStateOf(claim(s.two, { ...op, rerun_after_unknown: null }))).toBe('SE008');
    expect(await storedAttempts(s.superuser, op.tenant ?? '', op.key ?? '')).toEqual([]);
  });
});
