import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { backendPid, waitUntilBlocked } from './support/barrier.js';
import { uniqueKey, useEngineDatabase } from './support/database.js';
import { newOperation as anyOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import {
  acquire,
  claim,
  complete,
  fail,
  get,
  heartbeat,
  redrive,
  reportUnknown,
  type ClaimArgs,
  type Ticket,
} from './support/settle.js';

// The engine under adversarial timing: each sequence below, with real
// connections through the roles a deployment uses (a login granted settle_app, one granted
// settle_admin), interleaved by locks, never by sleeping.
const db = useEngineDatabase('adversarial_timing');
const loginRole = useLoginRoles(db);

/** Operations of one principal per test, so a revocation reaches no other test. */
function newOperation(prefix: string, overrides: Partial<ClaimArgs> = {}): ClaimArgs {
  return anyOperation(prefix, { principal: uniqueKey('svc'), ...overrides });
}

async function sessions() {
  const role = await loginRole('svc', ['settle_app']);
  const [one, two, three] = await Promise.all([role.connect(), role.connect(), role.connect()]);
  const admin = await (await loginRole('ops', ['settle_admin'])).connect();
  const superuser = await db.connect();
  return { one, two, three, admin, superuser };
}

/** The database clock, read on `client` (outside any transaction of the racing sessions). */
async function dbNow(client: pg.ClientBase): Promise<Date> {
  const { rows } = await client.query<{ now: Date }>('select clock_timestamp() as now');
  const now = rows[0]?.now;
  if (now === undefined) throw new Error('no clock');
  return now;
}

async function claimedAt(superuser: pg.ClientBase, op: ClaimArgs, attempt: number): Promise<Date> {
  const { rows } = await superuser.query<{ claimed_at: Date }>(
    'select claimed_at from settle.attempts where tenant = $1 and key = $2 and attempt = $3',
    [op.tenant, op.key, attempt],
  );
  const at = rows[0]?.claimed_at;
  if (at === undefined) throw new Error(`no attempt ${attempt}`);
  return at;
}

/**
 * `holder` runs `hold` inside BEGIN (taking the operation's row lock); `waiter` starts `call`,
 * which must queue behind it; once it is seen waiting, `meanwhile` runs (e.g. a revocation that
 * commits during the wait), then the holder ends its transaction (`end`). Returns the waiter's
 * answer and the database time just before the holder released the row.
 */
async function whileWaiting<T, H = unknown>(
  s: { observer: pg.ClientBase },
  holder: pg.ClientBase,
  hold: (c: pg.ClientBase) => Promise<H>,
  waiter: pg.ClientBase,
  call: (c: pg.ClientBase) => Promise<T>,
  options: { end: 'commit' | 'rollback'; meanwhile?: () => Promise<unknown> },
): Promise<{ answer: T; held: H; released: Date }> {
  const pid = await backendPid(waiter);
  await holder.query('begin');
  let pending: Promise<T> | undefined;
  try {
    const held = await hold(holder);
    pending = call(waiter);
    pending.catch(() => {});
    await waitUntilBlocked(s.observer, pid);
    await options.meanwhile?.();
    const released = await dbNow(s.observer);
    await holder.query(options.end);
    return { answer: await pending, held, released };
  } catch (error) {
    await holder.query('rollback').catch(() => {});
    throw error;
  }
}

/** Holds the operation row as any writer would (a superuser's FOR UPDATE: no engine state changes). */
function lockRow(op: ClaimArgs) {
  return (c: pg.ClientBase) =>
    c.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [op.tenant, op.key]);
}

describe('§1 a lease is measured from the decision under the row lock', () => {
  it('a first claim that waited behind a rolled-back first claim gets a lease from after the wait', async () => {
    const s = await sessions();
    const op = newOperation('lapsed-insert', { lease: '2 seconds' });
    const { answer, released } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => claim(c, { ...op, lease: '30 seconds', worker: 'w1' }),
      s.two,
      (c) => claim(c, { ...op, worker: 'w2' }),
      { end: 'rollback' },
    );
    expect(answer.outcome).toBe('acquired');
    expect(answer.attempt).toBe(1);
    const at = await claimedAt(s.superuser, op, 1);
    // Decided after the row became free: the lease starts no earlier than that. claimed_at is
    // the claim's start, written with the reservation before the insert waited (the identity
    // of an attempt never changes afterwards).
    expect(at.getTime()).toBeLessThanOrEqual(released.getTime());
    expect(answer.lease_expires_at?.getTime()).toBeGreaterThanOrEqual(released.getTime() + 2000);
    // Nobody can take it over while it is live.
    expect((await claim(s.three, op)).outcome).toBe('in_progress');
  });

  it('a new attempt that waited on the row lock gets a lease from after the wait', async () => {
    const s = await sessions();
    const op = newOperation('lapsed-locked', { lease: '2 seconds' });
    await fail(s.one, await acquire(s.one, op), { code: 'retry' }, true);
    const { answer, released } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => claim(c, { ...op, lease: '30 seconds', worker: 'w1' }),
      s.two,
      (c) => claim(c, { ...op, worker: 'w2' }),
      { end: 'rollback' },
    );
    expect(answer).toMatchObject({ outcome: 'acquired', attempt: 2 });
    const at = await claimedAt(s.superuser, op, 2);
    expect(at.getTime()).toBeGreaterThanOrEqual(released.getTime());
    expect(answer.lease_expires_at?.getTime()).toBe(at.getTime() + 2000);
  });

  it('a heartbeat that waited on the row lock extends from after the wait', async () => {
    const s = await sessions();
    const op = newOperation('lapsed-heartbeat');
    const ticket = await acquire(s.one, op);
    const { answer, released } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => heartbeat(c, ticket, '30 seconds'),
      s.two,
      (c) => heartbeat(c, ticket, '1 second'),
      { end: 'rollback' },
    );
    expect(answer.outcome).toBe('extended');
    expect(answer.lease_expires_at?.getTime()).toBeGreaterThanOrEqual(released.getTime() + 1000);
    expect((await mustGetOperation(s.superuser, ticket.tenant, ticket.key)).lease_expires_at).toEqual(
      answer.lease_expires_at,
    );
  });
});

describe('§2 access is judged again after the row lock', () => {
  it('a claim waiting on the row while its generation is revoked is refused, not acquired', async () => {
    const s = await sessions();
    const op = newOperation('revoked-while-waiting', { binding_generation: 1 });
    await fail(s.one, await acquire(s.one, op), { code: 'retry' }, true);
    const { answer } = await whileWaiting(
      { observer: s.superuser },
      s.superuser,
      lockRow(op),
      s.two,
      (c) => claim(c, op),
      {
        end: 'rollback',
        meanwhile: () => s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]),
      },
    );
    expect(answer).toMatchObject({ outcome: 'refused', reason: 'binding_revoked', attempt: null, lease_token: null });
    expect(await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).toMatchObject({
      attempt: 1,
      lease_token: null,
    });
  });

  it('a success waiting on the row while its generation is revoked does not settle', async () => {
    const s = await sessions();
    const op = newOperation('revoked-complete', { binding_generation: 1 });
    const ticket = await acquire(s.one, op);
    const { answer } = await whileWaiting(
      { observer: s.superuser },
      s.superuser,
      lockRow(op),
      s.two,
      (c) => complete(c, ticket, { paid: true }),
      {
        end: 'rollback',
        meanwhile: () => s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]),
      },
    );
    expect(answer).toMatchObject({ outcome: 'fenced', reason: 'binding_revoked', result: null });
    expect(await mustGetOperation(s.superuser, ticket.tenant, ticket.key)).toMatchObject({
      status: 'conflict',
      result: null,
    });
  });

  it('a new key whose first claim waited behind a rolled-back claim while the generation was revoked runs nothing', async () => {
    const s = await sessions();
    const op = newOperation('revoked-insert', { binding_generation: 1 });
    const { answer } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => claim(c, op),
      s.two,
      (c) => claim(c, op),
      {
        end: 'rollback',
        meanwhile: () => s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]),
      },
    );
    expect(answer).toMatchObject({ outcome: 'refused', reason: 'binding_revoked', lease_token: null });
    expect(await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).toMatchObject({
      status: 'conflict',
      lease_token: null,
    });
  });
});

describe("§1-2 a claim that waited behind another session's first claim of the key, which committed", () => {
  it('judges the lease with the time after the wait: a lease that lapsed meanwhile is taken over', async () => {
    const s = await sessions();
    const op = newOperation('wait-commit-lapse', { lease: '1 second' });
    const { answer, released } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => claim(c, op),
      s.two,
      (c) => claim(c, op),
      {
        end: 'commit',
        // The holder's lease (1 s from its claim) lapses while the waiter waits.
        meanwhile: () => s.superuser.query('select pg_sleep(1.2)'),
      },
    );
    expect(answer).toMatchObject({ outcome: 'acquired', attempt: 2 });
    expect(answer.lease_expires_at?.getTime()).toBeGreaterThan(released.getTime());
  });

  it('judges the floor after the wait: a generation revoked meanwhile is refused', async () => {
    const s = await sessions();
    const op = newOperation('wait-commit-revoke', { binding_generation: 1 });
    const { answer } = await whileWaiting(
      { observer: s.superuser },
      s.one,
      (c) => claim(c, op),
      s.two,
      (c) => claim(c, op),
      {
        end: 'commit',
        meanwhile: () => s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]),
      },
    );
    expect(answer).toMatchObject({ outcome: 'refused', reason: 'binding_revoked', attempt: null, status: null });
  });
});

describe('§3 a caller that cannot change the record never waits on the row', () => {
  const ZERO = '00000000-0000-0000-0000-000000000000';

  /** The hostile call runs in an open transaction; the lease holder's call must not wait for it. */
  async function holdsNothing(
    s: Awaited<ReturnType<typeof sessions>>,
    hostile: (c: pg.ClientBase) => Promise<unknown>,
    ticket: Ticket,
  ) {
    await s.two.query('begin');
    try {
      await hostile(s.two);
      // With the bug the holder would wait for ever; lock_timeout turns that into an error.
      await s.one.query(`set lock_timeout = '20s'`);
      expect(await heartbeat(s.one, ticket)).toMatchObject({ outcome: 'extended' });
      expect(await complete(s.one, ticket, { paid: 1 })).toMatchObject({ outcome: 'settled' });
    } finally {
      await s.two.query('commit');
    }
  }

  it('heartbeat with a zero token', async () => {
    const s = await sessions();
    const ticket = await acquire(s.one, newOperation('hostage-heartbeat'));
    await holdsNothing(s, (c) => heartbeat(c, { ...ticket, lease_token: ZERO }), ticket);
    const trail = await auditTrail(s.superuser, ticket.tenant, ticket.key);
    expect(trail.some((row) => row.event === 'heartbeat' && row.outcome === 'fenced')).toBe(true);
  });

  for (const [name, call] of [
    ['complete', (c: pg.ClientBase, t: Ticket) => complete(c, t, { x: 1 })],
    ['fail', (c: pg.ClientBase, t: Ticket) => fail(c, t, { x: 1 }, false)],
    ['report_unknown', (c: pg.ClientBase, t: Ticket) => reportUnknown(c, t)],
  ] as const) {
    it(`${name} with a guessed token, and with a real token of another attempt number`, async () => {
      const s = await sessions();
      const ticket = await acquire(s.one, newOperation(`hostage-${name}`));
      await holdsNothing(
        s,
        async (c) => {
          expect(await call(c, { ...ticket, lease_token: ZERO })).toMatchObject({
            outcome: 'fenced',
            reason: 'invalid_token',
            status: null,
          });
          expect(await call(c, { ...ticket, attempt: 2 })).toMatchObject({
            outcome: 'fenced',
            reason: 'invalid_token',
            status: null,
          });
        },
        ticket,
      );
      const fenced = (await auditTrail(s.superuser, ticket.tenant, ticket.key)).filter(
        (row) => row.event === name && row.outcome === 'fenced',
      );
      expect(fenced).toHaveLength(2);
    });
  }

  it('claim and get presenting a revoked generation', async () => {
    const s = await sessions();
    const op = newOperation('hostage-revoked', { binding_generation: 2 });
    const ticket = await acquire(s.one, op);
    await s.admin.query('select settle.revoke_binding($1, $2, 2)', [op.tenant, op.principal]);
    await holdsNothing(
      s,
      async (c) => {
        expect(await claim(c, { ...op, binding_generation: 1 })).toMatchObject({
          outcome: 'refused',
          reason: 'binding_revoked',
        });
        expect(await get(c, { ...op, binding_generation: 1 })).toMatchObject({
          outcome: 'refused',
          reason: 'binding_revoked',
        });
      },
      ticket,
    );
  });
});

describe('§4 conflict is never erased to failed, nor redriven below conflict', () => {
  it('fail(retryable), a mismatched success of the same attempt, then the last attempt fails', async () => {
    const s = await sessions();
    const op = newOperation('conflict-then-fail', { max_attempts: 2 });
    const first = await acquire(s.one, op);
    expect(await fail(s.one, first, { code: 'retry' }, true)).toMatchObject({ outcome: 'recorded' });
    expect(await complete(s.one, { ...first, binding_generation: 7 }, { other: true })).toMatchObject({
      outcome: 'conflict',
    });
    expect((await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).status).toBe('conflict');
    expect(await fail(s.one, await acquire(s.one, op), { code: 'retry' }, true)).toMatchObject({
      outcome: 'recorded',
      reason: 'needs_reconciliation',
      status: 'conflict',
      dead_letter_reason: 'needs_reconciliation',
    });
    expect(await claim(s.one, op)).toMatchObject({ outcome: 'unknown', dead_letter_reason: 'needs_reconciliation' });
    await redrive(s.admin, {
      tenant: op.tenant ?? '',
      key: op.key ?? '',
      additional_attempts: 1,
      request: op.request,
      reason: 'ticket-18',
    });
    expect((await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).status).toBe('conflict');
    expect(await fail(s.one, await acquire(s.one, op), { code: 'declined' }, false)).toMatchObject({
      status: 'conflict',
      reason: 'needs_reconciliation',
    });
  });

  it('racing: the mismatched success first ends in conflict; the failure first ends failed and the mismatch is only evidence', async () => {
    for (const order of ['conflict-first', 'failure-first'] as const) {
      const s = await sessions();
      const op = newOperation(`race-conflict-${order}`, { max_attempts: 2 });
      const first = await acquire(s.one, op);
      await fail(s.one, first, { code: 'retry' }, true);
      const second = await acquire(s.one, op);
      const mismatched = (c: pg.ClientBase) => complete(c, { ...first, binding_generation: 7 }, { other: true });
      const lastFailure = (c: pg.ClientBase) => fail(c, second, { code: 'retry' }, true);
      const [a, b] = order === 'conflict-first' ? [mismatched, lastFailure] : [lastFailure, mismatched];
      await whileWaiting({ observer: s.superuser }, s.one, a, s.two, b, { end: 'commit' });
      if (order === 'conflict-first') {
        expect((await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).status).toBe('conflict');
        expect((await claim(s.three, op)).outcome).toBe('unknown');
      } else {
        // Every attempt had recorded a failure when it ended: a committed failure. A success for
        // another intent cannot lift it (only a matching success outranks failed) and the lattice
        // never lowers it to conflict; the mismatch is kept as evidence.
        expect((await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).status).toBe('failed');
        const trail = await auditTrail(s.superuser, op.tenant ?? '', op.key ?? '');
        expect(trail.some((row) => row.event === 'complete' && row.outcome === 'conflict')).toBe(true);
      }
    }
  });
});

describe('§5 a later final failure never overrides an earlier unknown', () => {
  it('attempt 1 unknown, attempt 2 fails finally, attempt 1 then completes', async () => {
    const s = await sessions();
    const op = newOperation('unknown-then-final');
    const first = await acquire(s.one, op);
    await reportUnknown(s.one, first);
    expect(await fail(s.one, await acquire(s.one, op), { code: 'declined' }, false)).toMatchObject({
      outcome: 'recorded',
      reason: 'needs_reconciliation',
      status: 'unknown',
    });
    expect(await claim(s.one, op)).toMatchObject({ outcome: 'unknown', dead_lettered: true });
    expect(await get(s.one, op)).toMatchObject({ outcome: 'found', status: 'unknown', dead_lettered: true });
    expect(await complete(s.one, first, { charge: 'ch_1' })).toMatchObject({ outcome: 'settled', status: 'completed' });
  });

  it("racing: a lapsed attempt's late success and the next attempt's final failure, in either order, never answer failed", async () => {
    for (const order of ['success-first', 'failure-first'] as const) {
      const s = await sessions();
      const op = newOperation(`race-final-${order}`);
      const first = await acquire(s.one, op);
      await expireLease(s.superuser, first.tenant, first.key);
      const second = await acquire(s.one, op);
      const late = (c: pg.ClientBase) => complete(c, first, { charge: 'ch_1' });
      const final = (c: pg.ClientBase) => fail(c, second, { code: 'declined' }, false);
      const [a, b] = order === 'success-first' ? [late, final] : [final, late];
      const { answer, held } = await whileWaiting({ observer: s.superuser }, s.one, a, s.two, b, { end: 'commit' });
      // Neither call, nor a claim in between, is ever told `failed`: attempt 1 may have charged.
      expect(held.status).not.toBe('failed');
      expect(answer.status).not.toBe('failed');
      expect(await mustGetOperation(s.superuser, op.tenant ?? '', op.key ?? '')).toMatchObject({
        status: 'completed',
        result: { charge: 'ch_1' },
      });
    }
  });
});

describe('§9 conflict_on is no oracle', () => {
  it('another principal or binding learns only `binding`; the same binding learns `request`; every probe is audited', async () => {
    const s = await sessions();
    const op = newOperation('oracle', { scopes: ['payments:write'], binding_generation: 3 });
    await complete(s.one, await acquire(s.one, op), { payment_id: 'pay_1' });
    const probes: [Partial<ClaimArgs>, string[]][] = [
      [{ principal: 'mallory' }, ['binding']],
      [{ principal: 'mallory', request: { amount: '99.00' } }, ['binding']],
      [{ scopes: ['payments:write', 'admin'] }, ['binding']],
      [{ binding_generation: 4 }, ['binding']],
      [{ binding_generation: 4, request: { amount: '99.00' } }, ['binding']],
      [{ request: { amount: '99.00' } }, ['request']],
    ];
    for (const [change, expected] of probes) {
      expect(await claim(s.two, { ...op, ...change })).toMatchObject({
        outcome: 'conflict',
        conflict_on: expected,
        result: null,
      });
      expect(await get(s.two, { ...op, ...change })).toMatchObject({
        outcome: 'conflict',
        conflict_on: expected,
        result: null,
      });
    }
    const conflicts = (await auditTrail(s.superuser, op.tenant ?? '', op.key ?? '')).filter(
      (row) => row.outcome === 'conflict',
    );
    expect(conflicts.filter((row) => row.event === 'claim')).toHaveLength(probes.length);
    expect(conflicts.find((row) => row.event === 'claim')?.detail).toMatchObject({
      presented: { principal: 'mallory' },
    });
  });
});
