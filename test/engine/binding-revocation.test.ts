import type pg from 'pg';
import { beforeEach, describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { secondWaitsForFirst } from './support/barrier.js';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation as anyOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation, storedAttempts } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, fail, get, heartbeat, reportUnknown, type ClaimArgs } from './support/settle.js';

// settle.revoke_binding(tenant, principal, below_generation). The lock stays
// immutable; a generation below the floor is refused everywhere (reason binding_revoked), and an
// operation reserved under it can no longer complete (it moves to conflict at its next touch).
const db = useEngineDatabase('binding_revocation');
const loginRole = useLoginRoles(db);

/** Operations of one principal per test: a revocation never reaches another test's operations. */
let principal = uniqueKey('svc');
beforeEach(() => {
  principal = uniqueKey('svc');
});
const newOperation: typeof anyOperation = (prefix, overrides = {}) => anyOperation(prefix, { principal, ...overrides });

async function revoke(admin: pg.ClientBase, op: ClaimArgs, below: number): Promise<number> {
  const { rows } = await admin.query<{ floor: string }>(
    `select settle.revoke_binding(tenant => $1, principal => $2, below_generation => $3) as floor`,
    [op.tenant, op.principal, below],
  );
  return Number(rows[0]?.floor);
}

async function sessions() {
  const app = await (await loginRole('svc', ['settle_app'])).connect();
  const admin = await (await loginRole('ops', ['settle_admin'])).connect();
  const superuser = await db.connect();
  return { app, admin, superuser };
}

describe('settle.revoke_binding', () => {
  it('a generation-1 attempt can no longer settle after the principal re-authenticated as generation 2', async () => {
    const { app, admin, superuser } = await sessions();
    const op = newOperation('reauth', { binding_generation: 1 });
    const ticket = await acquire(app, op);
    expect(await revoke(admin, op, 2)).toBe(2);

    const late = await complete(app, ticket, { payment_id: 'late' });
    expect(late).toMatchObject({ outcome: 'fenced', reason: 'binding_revoked', result: null, status: null });
    const stored = await mustGetOperation(superuser, op.tenant ?? '', op.key ?? '');
    expect(stored).toMatchObject({ status: 'conflict', result: null, lease_token: null });
    expect(stored.error).toMatchObject({ code: 'binding_revoked', below_generation: 2, may_have_taken_effect: true });
    expect((await storedAttempts(superuser, op.tenant ?? '', op.key ?? ''))[0]).toMatchObject({
      end_reason: 'binding_revoked',
      settled: false,
    });
    // The refused success is kept as evidence in the audit log.
    const trail = await auditTrail(superuser, op.tenant ?? '', op.key ?? '');
    expect(trail.find((row) => row.event === 'complete')).toMatchObject({
      outcome: 'fenced',
      detail: {
        reason: 'binding_revoked',
        presented: { binding_generation: 1, fingerprint: ticket.fingerprint, result: { payment_id: 'late' } },
      },
    });
    expect(trail.find((row) => row.event === 'revoke')).toMatchObject({
      outcome: 'binding_revoked',
      status_before: 'running',
      status_after: 'conflict',
    });
  });

  it('every call presenting a revoked generation is refused: claim, heartbeat, fail, report_unknown, get', async () => {
    const { app, admin } = await sessions();
    const op = newOperation('everywhere', { binding_generation: 3 });
    const ticket = await acquire(app, op);
    await revoke(admin, op, 4);
    expect(await claim(app, op)).toMatchObject({
      outcome: 'refused',
      reason: 'binding_revoked',
      status: null,
      result: null,
      attempt: null,
    });
    expect(await claim(app, newOperation('fresh', { binding_generation: 3 }))).toMatchObject({
      outcome: 'refused',
      reason: 'binding_revoked',
    });
    expect(await heartbeat(app, ticket)).toMatchObject({
      outcome: 'fenced',
      reason: 'binding_revoked',
      lease_expires_at: null,
    });
    expect(await fail(app, ticket, { e: 1 })).toMatchObject({ outcome: 'fenced', reason: 'binding_revoked' });
    expect(await reportUnknown(app, ticket)).toMatchObject({ outcome: 'fenced', reason: 'binding_revoked' });
    expect(await get(app, op)).toMatchObject({
      outcome: 'refused',
      reason: 'binding_revoked',
      status: null,
      result: null,
    });
    // Other principals of the tenant, and the same principal in another tenant, are untouched.
    expect(
      (await claim(app, newOperation('other', { principal: uniqueKey('svc-other'), binding_generation: 3 }))).outcome,
    ).toBe('acquired');
    expect((await claim(app, newOperation('other', { tenant: 'globex', binding_generation: 3 }))).outcome).toBe(
      'acquired',
    );
    // The floor only rises: a lower revocation keeps the higher floor.
    expect(await revoke(admin, op, 2)).toBe(4);
  });

  it('the safe path: re-authenticated at generation 2, get on the old key says whether it took effect', async () => {
    const { app, admin } = await sessions();
    // Completed before the revocation: the result stands, and generation 2 may read it.
    const done = newOperation('done', { binding_generation: 1 });
    await complete(app, await acquire(app, done), { paid: true });
    // Reported unknown: may have taken effect, can never complete now.
    const doubt = newOperation('doubt', { binding_generation: 1 });
    const doubtTicket = await acquire(app, doubt);
    await reportUnknown(app, doubtTicket);
    // Failed for certain (final failure): took no effect.
    const failed = newOperation('failed', { binding_generation: 1 });
    await fail(app, await acquire(app, failed), { declined: true }, false);
    await revoke(admin, done, 2);

    expect(await get(app, { ...done, binding_generation: 2 })).toMatchObject({
      outcome: 'found',
      reason: 'reauthenticated',
      status: 'completed',
      result: { paid: true },
    });
    expect(await get(app, { ...doubt, binding_generation: 2 })).toMatchObject({
      outcome: 'found',
      reason: 'reauthenticated',
      status: 'conflict',
      error: { code: 'binding_revoked', may_have_taken_effect: true },
    });
    expect(await get(app, { ...failed, binding_generation: 2 })).toMatchObject({
      outcome: 'found',
      reason: 'reauthenticated',
      status: 'failed',
      error: { declined: true },
    });
    // A late success of the unknown attempt is refused and changes nothing.
    expect((await complete(app, doubtTicket, { paid: 'late' })).outcome).toBe('fenced');
    expect(await get(app, { ...doubt, binding_generation: 2 })).toMatchObject({ status: 'conflict', result: null });
    // Another principal at generation 2 still gets a conflict: only the re-authenticated principal reads.
    expect(await get(app, { ...doubt, principal: 'svc-other', binding_generation: 2 })).toMatchObject({
      outcome: 'conflict',
      status: null,
    });
  });

  it('racing: a success holding the row lock commits first, the safe-path read waits and sees it completed', async () => {
    const { app, admin } = await sessions();
    const reader = await (await loginRole('svc2', ['settle_app'])).connect();
    const observer = await db.connect();
    const op = newOperation('race-a', { binding_generation: 1 });
    const ticket = await acquire(app, op);
    const [settled, read] = await secondWaitsForFirst(
      { one: app, two: reader, observer },
      async (one) => {
        const answer = await complete(one, ticket, { won: 'success' });
        await revoke(admin, op, 2); // commits while the success is still uncommitted
        return answer;
      },
      (two) => get(two, { ...op, binding_generation: 2 }),
    );
    expect(settled.outcome).toBe('settled');
    expect(read).toMatchObject({
      outcome: 'found',
      reason: 'reauthenticated',
      status: 'completed',
      result: { won: 'success' },
    });
  });

  it('racing: the safe-path read converts the operation first, the waiting success is refused', async () => {
    const { app, admin, superuser } = await sessions();
    const worker = await (await loginRole('worker', ['settle_app'])).connect();
    const observer = await db.connect();
    const op = newOperation('race-b', { binding_generation: 1 });
    const ticket = await acquire(app, op);
    await revoke(admin, op, 2);
    const [read, late] = await secondWaitsForFirst(
      { one: app, two: worker, observer },
      (one) => get(one, { ...op, binding_generation: 2 }),
      (two) => complete(two, ticket, { won: 'late' }),
    );
    expect(read).toMatchObject({ outcome: 'found', status: 'conflict' });
    expect(late).toMatchObject({ outcome: 'fenced', reason: 'binding_revoked' });
    expect(await mustGetOperation(superuser, op.tenant ?? '', op.key ?? '')).toMatchObject({
      status: 'conflict',
      result: null,
    });
  });

  it('a lapsed, failed or dead-lettered operation under a revoked generation can never complete', async () => {
    const { app, admin, superuser } = await sessions();
    const op = newOperation('failed-late', { binding_generation: 1, max_attempts: 1 });
    const first = await acquire(app, op);
    await fail(app, first, { retry: 'later' }, true); // budget spent: failed, dead-lettered
    await revoke(admin, op, 2);
    expect((await complete(app, first, { paid: true })).outcome).toBe('fenced');
    expect(await mustGetOperation(superuser, op.tenant ?? '', op.key ?? '')).toMatchObject({
      status: 'failed',
      result: null,
    });

    const lapsed = newOperation('lapsed', { principal: uniqueKey('svc-lapsed'), binding_generation: 1 });
    const ticket = await acquire(app, lapsed);
    await expireLease(superuser, lapsed.tenant ?? '', lapsed.key ?? '');
    await revoke(admin, lapsed, 2);
    expect(await claim(app, lapsed)).toMatchObject({ outcome: 'refused', reason: 'binding_revoked' });
    // A claim presenting a revoked generation is answered from a plain read and
    // converts nothing (anyone who knows the principal's name could present it).
    expect(await mustGetOperation(superuser, lapsed.tenant ?? '', lapsed.key ?? '')).toMatchObject({
      status: 'running',
    });
    // The attempt's own token holder may wait on the row: it is fenced and the operation converted.
    expect((await complete(app, ticket, { paid: true })).outcome).toBe('fenced');
    expect(await mustGetOperation(superuser, lapsed.tenant ?? '', lapsed.key ?? '')).toMatchObject({
      status: 'conflict',
      lease_token: null,
    });
  });

  it('only settle_admin revokes, with typed errors for bad arguments, and every revocation is in settle.admin_log', async () => {
    const { app, admin } = await sessions();
    expect(await sqlStateOf(app.query(`select settle.revoke_binding('acme', 'svc', 2)`))).toBe('42501');
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('', 'svc', 2)`))).toBe('SE001');
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('acme', '', 2)`))).toBe('SE003');
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('acme', 'svc', 0)`))).toBe('SE008');
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('acme', 'svc', null)`))).toBe('SE008');
    const op = newOperation('logged');
    await revoke(admin, op, 7);
    const { rows } = await admin.query(
      `select event, actor, detail from settle.admin_log where event = 'revoke_binding' and detail->>'principal' = $1`,
      [op.principal],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({
      event: 'revoke_binding',
      detail: { tenant: 'acme', principal: op.principal, below_generation: 7, previous: null },
    });
  });
});
