import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { roleUrl } from './harness/app-url.js';
import { check, describeViolations } from './harness/checker.js';
import { recordFigures } from './harness/figures.js';
import { readEngineState, type EngineState, type OperationRow } from '../../src/checker/engine-state.js';
import { History, type Answer, type CompletedOp } from './harness/history.js';
import type { Invariant } from './harness/invariants.js';
import { acquiredTicket, recording } from './harness/recorder.js';
import { createQuietPool, createSqlDriver } from './harness/sql-driver.js';
import { useReliabilityDatabase } from './support/database.js';

// A clean history recorded against the real engine (stale worker fenced, late success,
// replay, conflict, final failure, order B), then the same history and final state with one
// bug planted at a time: the checker must name the broken invariant.

const db = useReliabilityDatabase('checker');
const TENANT = 'checker';
const BINDING = { principal: 'alice', scopes: ['pay'], generation: '1' };
const request = (key: string) => ({ key, amount: 100 });

let ops: CompletedOp[];
let state: EngineState;
/** Figures: one planted bug per checked report (a report may be expected to break two invariants). */
const planted = new Set<ReturnType<typeof check>>();
const missed = new Set<ReturnType<typeof check>>();
let cleanViolations = 0;

afterAll(() => {
  recordFigures({
    scenario: 'checker/self-test',
    operations: ops?.length ?? 0,
    faults: planted.size,
    violations: missed.size + cleanViolations,
    details: { plantedBugs: planted.size, caught: planted.size - missed.size, cleanHistoryViolations: cleanViolations },
  });
});

beforeAll(async () => {
  const history = new History();
  const pool = createQuietPool(roleUrl(db.url, 'reliability-checker'), 2);
  const admin = await db.connect();
  try {
    const driver = createSqlDriver(pool);
    const [p1, p2, p3, p4] = [1, 2, 3, 4].map((p) => recording(driver, history, p));
    if (p1 === undefined || p2 === undefined || p3 === undefined || p4 === undefined) throw new Error('unreachable');
    const claimOf = (key: string) => ({ tenant: TENANT, key, request: request(key), binding: BINDING });

    // a: p1 acquires, stalls past its lease; p2 takes over and settles; p1 comes back.
    const t1 = acquiredTicket(await p1.claim(claimOf('a')));
    await expireLease(admin, TENANT, 'a');
    const t2 = acquiredTicket(await p2.claim(claimOf('a')));
    await p1.heartbeat(t1);
    await p1.fail(t1, { code: 'stale' }, true);
    await p2.complete(t2, { receipt: 'a-2', amount: 10.5 });
    await p1.complete(t1, { receipt: 'a-1' });
    await p3.claim(claimOf('a'));
    await p4.claim({ ...claimOf('a'), request: { key: 'a', amount: 999 } });
    await p3.get(claimOf('a'));
    await p4.get({ ...claimOf('a'), binding: { ...BINDING, principal: 'mallory' } });

    // b: final failure, then a retry replays it.
    const tb = acquiredTicket(await p1.claim(claimOf('b')));
    await p1.fail(tb, { code: 'card_declined' }, false);
    await p2.claim(claimOf('b'));

    // c: order B, unknown then success of the same attempt; a duplicate complete.
    const tc = acquiredTicket(await p1.claim(claimOf('c')));
    await p1.reportUnknown(tc);
    await p1.complete(tc, { receipt: 'c-1' });
    await p1.complete(tc, { receipt: 'c-1' });
    await p4.complete({ ...tc, binding: { ...BINDING, generation: '2' } }, { receipt: 'forged' });

    // d, e: the attempt reports unknown; an operator resolves the operation, completed
    // through an attempt epoch of its own, or failed; retries replay the verified outcome.
    for (const [key, outcome] of [
      ['d', 'completed'],
      ['e', 'failed'],
    ] as const) {
      const t = acquiredTicket(await p1.claim(claimOf(key)));
      await p1.reportUnknown(t);
      await admin.query(
        `select settle.resolve(tenant => $1, key => $2, fingerprint => settle.fingerprint($3::jsonb), outcome => $4, reason => 'checked the ledger',
                               expected_attempt => (select o.attempt from settle.inspect($1, $2) o),
                               result => $5::jsonb, error => $6::jsonb)`,
        [
          TENANT,
          key,
          JSON.stringify(request(key)),
          outcome,
          outcome === 'completed' ? '{"receipt":"d-r"}' : null,
          outcome === 'failed' ? '{"code":"never_sent"}' : null,
        ],
      );
      await p2.claim(claimOf(key));
      await p1.complete(t, { receipt: `${key}-late` });
    }

    ops = history.ops();
    state = await readEngineState(admin, { tenants: [TENANT] });
  } finally {
    await pool.end();
  }
});

function plantAnswer(id: (op: CompletedOp) => boolean, change: (a: Answer) => Answer): CompletedOp[] {
  let planted = 0;
  const out = ops.map((op) => {
    if (!id(op) || op.answer === undefined) return op;
    planted += 1;
    return { ...op, answer: change(op.answer) };
  });
  expect(planted).toBe(1);
  return out;
}

function plantRecord(key: string, change: (op: OperationRow) => OperationRow): EngineState {
  return { ...state, operations: state.operations.map((op) => (op.key === key ? change(op) : op)) };
}

const firstOp = (kind: string, key: string, outcome: string) => (op: CompletedOp) =>
  op.op === kind && op.key === key && op.answer?.outcome === outcome;

/** `expectCaught`, and no other invariant is named: the plant breaks exactly this one. */
function expectCaughtAlone(report: ReturnType<typeof check>, invariant: Invariant): void {
  expectCaught(report, invariant);
  expect(Object.keys(report.byInvariant), describeViolations(report)).toEqual([invariant]);
}

function expectCaught(report: ReturnType<typeof check>, invariant: Invariant): void {
  planted.add(report);
  try {
    expect(report.valid).toBe(false);
    expect(report.byInvariant[invariant], describeViolations(report)).toBeGreaterThan(0);
  } catch (error) {
    missed.add(report);
    throw error;
  }
}

describe('the history checker', () => {
  it('passes the clean history recorded against the engine', () => {
    expect(ops.map((op) => `${op.key}:${op.op}:${op.answer?.outcome}`)).toContain('a:heartbeat:fenced');
    const report = check(ops, state);
    cleanViolations = report.violations.length;
    expect(report.violations, describeViolations(report)).toEqual([]);
    expect(report.keys).toBe(5);
    expect(
      state.audit.filter((row) => row.event === 'resolve').map((row) => `${row.key}:${row.outcome}:${row.statusAfter}`),
    ).toEqual(['d:resolved:completed', 'e:resolved:failed']);
  });

  it('catches a resolution of an operation that had not lost its outcome, and a second settlement by resolution', () => {
    const running = state.audit.map((row) =>
      row.key === 'e' && row.event === 'resolve' ? { ...row, statusBefore: 'running' as const } : row,
    );
    expectCaught(check(ops, { ...state, audit: running }), 'resolution-final');
    const d = state.audit.filter((row) => row.key === 'd');
    const resolution = d.find((row) => row.event === 'resolve');
    if (resolution === undefined) throw new Error('no resolve row for d');
    const twice = [
      ...state.audit,
      {
        ...resolution,
        auditId: (BigInt(d.at(-1)?.auditId ?? '0') + 1n).toString(),
        statusBefore: 'completed' as const,
        attempt: (resolution.attempt ?? 0) + 1,
      },
    ];
    expectCaught(check(ops, { ...state, audit: twice }), 'single-settlement');
  });

  it('catches a planted double settlement (a second settled attempt and a second `settled` answer)', () => {
    const attempts = state.attempts.map((a) => (a.key === 'a' && a.attempt === 1 ? { ...a, settled: true } : a));
    expectCaught(check(ops, { ...state, attempts }), 'single-settlement');
    const planted = plantAnswer(firstOp('complete', 'a', 'already_settled'), (a) => ({
      ...a,
      outcome: 'settled',
      reason: 'superseded_attempt',
    }));
    expectCaught(check(planted, state), 'single-settlement');
  });

  it('catches a planted downgrade in the audit trail and in the stored record', () => {
    const audit = state.audit.map((row) =>
      row.key === 'c' && row.event === 'complete' && row.outcome === 'duplicate'
        ? { ...row, statusAfter: 'unknown' as const }
        : row,
    );
    expectCaught(check(ops, { ...state, audit }), 'status-monotonic');
    const downgraded = plantRecord('b', (op) => ({ ...op, status: 'unknown' }));
    expectCaught(check(ops, downgraded), 'status-monotonic');
  });

  it('catches a downgrade planted in the database by a superuser who disabled the lattice trigger', async () => {
    const admin = await db.connect();
    const key = 'planted-downgrade';
    const history = new History();
    const pool = createQuietPool(roleUrl(db.url, 'reliability-checker'), 1);
    try {
      const p = recording(createSqlDriver(pool), history, 9);
      const t = acquiredTicket(await p.claim({ tenant: TENANT, key, request: request(key), binding: BINDING }));
      await p.fail(t, { code: 'final' }, false);
      await admin.query('begin');
      await admin.query('alter table settle_private.operations disable trigger _100_guard_lattice');
      await admin.query(`update settle_private.operations set status = 'unknown' where tenant = $1 and key = $2`, [
        TENANT,
        key,
      ]);
      await admin.query('alter table settle_private.operations enable trigger _100_guard_lattice');
      await admin.query('commit');
      const report = check(history.ops(), await readEngineState(admin, { tenants: [TENANT] }));
      expectCaught(report, 'status-monotonic');
      expectCaught(report, 'audit-continuity');
    } finally {
      await pool.end();
    }
  });

  it('catches a lost acknowledged write (the settled completion is not in the final state)', () => {
    const lost = plantRecord('c', (op) => ({
      ...op,
      status: 'unknown',
      result: null,
      resultText: null,
      settledAttempt: null,
    }));
    expectCaught(check(ops, lost), 'acknowledged-completion-durable');
  });

  it('catches a disclosed conflict and a mismatched claim that saw the stored result', () => {
    const disclosed = plantAnswer(firstOp('claim', 'a', 'conflict'), (a) => ({
      ...a,
      status: 'completed',
      result: { receipt: 'a-2', amount: 10.5 },
    }));
    expectCaught(check(disclosed, state), 'conflict-discloses-nothing');
    const replayed = plantAnswer(firstOp('claim', 'a', 'conflict'), () => ({
      outcome: 'replay',
      result: { receipt: 'a-2', amount: 10.5 },
      settledAttempt: 2,
    }));
    expectCaught(check(replayed, state), 'mismatch-never-settles');
  });

  it('catches a changed result, a changed failure and a stale heartbeat that was extended', () => {
    const changed = plantAnswer(firstOp('claim', 'a', 'replay'), (a) => ({
      ...a,
      result: { receipt: 'a-2', amount: 10.51 },
    }));
    expectCaught(check(changed, state), 'result-immutable');
    const otherFailure = plantAnswer(firstOp('claim', 'b', 'failed'), (a) => ({ ...a, error: { code: 'other' } }));
    expectCaught(check(otherFailure, state), 'failure-replays');
    const extended = plantAnswer(firstOp('heartbeat', 'a', 'fenced'), (a) => ({
      ...a,
      outcome: 'extended',
      reason: null,
    }));
    expectCaught(check(extended, state), 'stale-fenced');
    const merged = plantAnswer(firstOp('fail', 'a', 'fenced'), (a) => ({
      ...a,
      outcome: 'recorded',
      reason: 'retryable_failure',
    }));
    expectCaught(check(merged, state), 'stale-fenced');
  });

  it('catches an attempt epoch acquired twice, an attempt opened while another held the lease, and a lease ended before it lapsed', () => {
    const twice = plantAnswer(
      (op) => firstOp('claim', 'a', 'acquired')(op) && op.answer?.attempt === 2,
      (a) => ({ ...a, attempt: 1 }),
    );
    expectCaughtAlone(check(twice, state), 'lease-exclusive');
    // Without the expiry row the next claim also starts where the trail never was.
    const unexpired = state.audit.filter((row) => !(row.key === 'a' && row.event === 'expire'));
    expect(unexpired).toHaveLength(state.audit.length - 1);
    const withoutExpiry = check(ops, { ...state, audit: unexpired });
    expectCaught(withoutExpiry, 'lease-exclusive');
    expect(Object.keys(withoutExpiry.byInvariant).sort()).toEqual(['audit-continuity', 'lease-exclusive']);
    expect(state.audit.filter((row) => row.endedLiveLease)).toEqual([]);
    const early = state.audit.map((row) =>
      row.key === 'a' && row.event === 'expire' ? { ...row, endedLiveLease: true } : row,
    );
    expectCaughtAlone(check(ops, { ...state, audit: early }), 'lease-exclusive');
  });

  it('catches a call presenting the reserved lock answered conflict', () => {
    const conflict = plantAnswer(firstOp('complete', 'c', 'duplicate'), () => ({
      outcome: 'conflict',
      reason: null,
      conflictOn: ['binding'],
    }));
    expectCaughtAlone(check(conflict, state), 'spurious-conflict');
  });
});
