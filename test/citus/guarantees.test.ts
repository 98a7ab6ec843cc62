import type pg from 'pg';
import { expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { newOperation } from '../engine/support/fixtures.js';
import { mustGetOperation, storedAttempts } from '../engine/support/inspect.js';
import {
  acquire,
  claim,
  complete,
  reportUnknown,
  type ClaimArgs,
  type ClaimRow,
  type Ticket,
} from '../engine/support/settle.js';
import { HOSTILE_NAMES, sqlErrorOf, storedCounts } from '../reliability/harness/hostile-inputs.js';
import { secondWaitsForFirstOnWorker, waitUntilBlockedOnWorker } from './support/barrier.js';
import { describeCitus, useCitus } from './support/cluster.js';

// The engine's guarantees, re-proved through a Citus coordinator with two workers: every call
// below goes through the coordinator as a login of settle_app and is delegated to the worker
// that holds the key (or, inside BEGIN, run from the coordinator on that worker).
const citus = useCitus();
const RESULT = { receipt: 'r-77', amount: '10.00' };

async function settlements(admin: pg.ClientBase, op: ClaimArgs): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    'select count(*)::int as n from settle.settlements where tenant = $1 and key = $2',
    [op.tenant, op.key],
  );
  return rows[0]?.n ?? -1;
}

/** A lease held by `one` ends by the clock; `two` takes over as attempt 2. */
async function supersededPair(app: pg.ClientBase, admin: pg.ClientBase, op: ClaimArgs): Promise<[Ticket, Ticket]> {
  const first = await acquire(app, op);
  expect(await expireLease(admin, first.tenant, first.key)).toBe(true);
  const second = await acquire(app, op);
  expect(second.attempt).toBe(2);
  return [first, second];
}

describeCitus('guarantees on a coordinator and two workers', () => {
  it('64 sessions racing on one new key: one acquired, 63 in_progress, one operation, one attempt', async () => {
    const SESSIONS = 64;
    const op = newOperation('stampede');
    const { worker, shardId } = await citus.placementOf(op.key as string);
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, () => citus.coordinator('settle_citus_app')));
    const [gate, observer] = await Promise.all([citus.worker(worker), citus.worker(worker)]);
    await gate.query('begin');
    await gate.query('set local citus.enable_manual_changes_to_shards = on');
    await gate.query(`lock table settle_private.operations_${shardId} in exclusive mode`);
    let answers: ClaimRow[];
    const all = Promise.all(sessions.map((s) => claim(s, op)));
    all.catch(() => {});
    try {
      await waitUntilBlockedOnWorker(observer, '%settle._claim(%', SESSIONS);
    } finally {
      await gate.query('rollback');
    }
    answers = await all;
    const outcomes = answers.map((a) => a.outcome);
    expect(outcomes.filter((o) => o === 'acquired')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'in_progress')).toHaveLength(SESSIONS - 1);
    for (const a of answers) expect(a).toMatchObject({ status: 'running', attempt: 1 });
    const admin = await citus.coordinator();
    const { rows } = await admin.query<{ n: number }>(
      'select count(*)::int as n from settle_private.operations where tenant = $1 and key = $2',
      [op.tenant, op.key],
    );
    expect(rows[0]?.n).toBe(1);
    expect(await storedAttempts(admin, op.tenant as string, op.key as string)).toHaveLength(1);
  }, 120_000);

  it('Order A: success first, timeout second: the unknown answers already_settled, completed stays', async () => {
    const [app, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const ticket = await acquire(app, newOperation('order-a'));
    expect(await complete(app, ticket, RESULT)).toMatchObject({ outcome: 'settled' });
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(await reportUnknown(app, ticket)).toMatchObject({
      outcome: 'already_settled',
      reason: 'attempt_already_observed',
      status: 'completed',
    });
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });

  it('Order A racing: the timeout queued on the worker behind the success is fenced', async () => {
    const [one, two, admin] = await Promise.all([
      citus.coordinator('settle_citus_app'),
      citus.coordinator('settle_citus_app'),
      citus.coordinator(),
    ]);
    const op = newOperation('order-a-race');
    const [old, current] = await supersededPair(one, admin, op);
    const workerObserver = await citus.worker((await citus.placementOf(op.key as string)).worker);
    const [settled, unknown] = await secondWaitsForFirstOnWorker(
      { one, two, workerObserver },
      (s) => complete(s, current, RESULT),
      (s) => reportUnknown(s, old),
      '%settle.report_unknown(%',
    );
    expect(settled).toMatchObject({ outcome: 'settled', settled_attempt: 2 });
    expect(unknown).toMatchObject({ outcome: 'fenced', reason: 'settled', status: 'completed', result: RESULT });
    expect(await settlements(admin, op)).toBe(1);
  });

  it('Order B: timeout first, success second: the success upgrades to completed with the result', async () => {
    const [app, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const ticket = await acquire(app, newOperation('order-b'));
    expect(await reportUnknown(app, ticket)).toMatchObject({ outcome: 'recorded', status: 'unknown' });
    expect(await complete(app, ticket, RESULT)).toMatchObject({
      outcome: 'settled',
      status: 'completed',
      result: RESULT,
      settled_attempt: 1,
    });
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'completed',
      result: RESULT,
    });
  });

  it('Order B racing: the success queued on the worker behind the timeout settles', async () => {
    const [one, two, admin] = await Promise.all([
      citus.coordinator('settle_citus_app'),
      citus.coordinator('settle_citus_app'),
      citus.coordinator(),
    ]);
    const op = newOperation('order-b-race');
    const [old, current] = await supersededPair(one, admin, op);
    const workerObserver = await citus.worker((await citus.placementOf(op.key as string)).worker);
    const [unknown, success] = await secondWaitsForFirstOnWorker(
      { one, two, workerObserver },
      (s) => reportUnknown(s, current),
      (s) => complete(s, old, RESULT),
      '%settle.complete(%',
    );
    expect(unknown).toMatchObject({ outcome: 'recorded', status: 'unknown' });
    expect(success).toMatchObject({ outcome: 'settled', status: 'completed', result: RESULT, settled_attempt: 1 });
    expect(await settlements(admin, op)).toBe(1);
  });

  it('Order C: a late success with a mismatched fingerprint or binding never upgrades; the operation moves to conflict', async () => {
    const [app, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const op = newOperation('order-c');
    const ticket = await acquire(app, op);
    expect(await claim(app, { ...op, request: { amount: '999.00' } })).toMatchObject({
      outcome: 'conflict',
      conflict_on: ['request'],
    });
    expect(await claim(app, { ...op, binding_generation: 2 })).toMatchObject({
      outcome: 'conflict',
      conflict_on: ['binding'],
    });
    const mismatched = await complete(app, { ...ticket, binding_generation: 2 }, RESULT);
    expect(mismatched).toMatchObject({ outcome: 'conflict', reason: 'lock_mismatch', result: null });
    expect(await mustGetOperation(admin, op.tenant as string, op.key as string)).toMatchObject({
      status: 'conflict',
      result: null,
      settled_attempt: null,
    });
    expect(await settlements(admin, op)).toBe(0);
  });

  it('crash -> lease expiry -> retry -> success: exactly one settlement, the crashed attempt ended by expiry', async () => {
    const [worker1, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const op = newOperation('crash-retry', { lease: '5 seconds' });
    const crashed = await acquire(worker1, op);
    // The process dies: its session is gone, it never reports.
    const pid = (await worker1.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid;
    await admin.query('select pg_terminate_backend($1::int)', [pid]);
    const retrier = await citus.coordinator('settle_citus_app');
    expect(await claim(retrier, op)).toMatchObject({ outcome: 'in_progress' });
    expect(await expireLease(admin, crashed.tenant, crashed.key)).toBe(true);
    const retry = await acquire(retrier, op);
    expect(retry.attempt).toBe(2);
    expect(await complete(retrier, retry, RESULT)).toMatchObject({ outcome: 'settled', settled_attempt: 2 });
    expect(await claim(retrier, op)).toMatchObject({ outcome: 'replay', result: RESULT, settled_attempt: 2 });
    expect(await settlements(admin, op)).toBe(1);
    const attempts = await storedAttempts(admin, op.tenant as string, op.key as string);
    expect(attempts.map((a) => [a.attempt, a.end_reason, a.settled])).toEqual([
      [1, 'lease_expired', false],
      [2, 'observed', true],
    ]);
  });

  it('hostile tenants and keys: the typed SQLSTATE, nothing stored anywhere', async () => {
    const [app, admin] = await Promise.all([citus.coordinator('settle_citus_app'), citus.coordinator()]);
    const before = await storedCounts(admin);
    // NULLs: on Citus the delegated functions are STRICT and a NULL argument answers a row of
    // NULLs, writing nothing (null-arguments.test.ts); every other hostile name its SQLSTATE.
    for (const c of HOSTILE_NAMES.filter((h) => h.value !== null)) {
      const op = newOperation('hostile', { [c.field]: c.value });
      const error = await sqlErrorOf(claim(app, op));
      expect({ label: c.label, code: error.code }).toEqual({ label: c.label, code: c.sqlstate });
    }
    const huge = await sqlErrorOf(claim(app, newOperation('huge', { request: { blob: 'x'.repeat(70_000) } })));
    expect(huge.code).toBe('SE004');
    expect(await storedCounts(admin)).toEqual(before);
  });
});
