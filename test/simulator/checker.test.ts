import { describe, expect, it } from 'vitest';
import { checkHistory, INVARIANTS, type InvariantName } from '../../src/simulator/checker.js';
import type { AttemptRow, AuditRow, OperationRow } from '../../src/checker/engine-state.js';
import type { Status } from '../../src/client/types.js';
import type { History, PayoutRow, ToldAnswer } from '../../src/simulator/history.js';

// Hand-built histories: one operation paid and settled cleanly by attempt 2 after attempt 1
// crashed after its effect (the idempotent downstream answered attempt 2 with attempt 1's
// payout), plus a conflicting retry that was refused.
const T = 'sim-t0';
const K = 'op-000001';
const RESULT = { payout_id: 'p-1', amount_cents: 1234, credited_by_attempt: 1 };

function told(partial: Partial<ToldAnswer> & Pick<ToldAnswer, 'call' | 'outcome'>): ToldAnswer {
  return { tenant: T, key: K, submission: 'original', fault: null, attempt: null, answer: { outcome: partial.outcome }, ...partial };
}

function audit(auditId: number, event: string, outcome: string, before: Status | null, after: Status | null): AuditRow {
  return { tenant: T, key: K, auditId: String(auditId), event, outcome, attempt: 1, statusBefore: before, statusAfter: after, detail: {}, endedLiveLease: false };
}

function attempt(n: number, observation: Status | null, settled: boolean, endReason: string): AttemptRow {
  return { tenant: T, key: K, attempt: n, observation, settled, endReason, error: null, retryable: null, lateResult: null };
}

/** The operation row the read-back returns; `change` plants a different record. */
function operation(change: Partial<OperationRow> = {}): OperationRow {
  return {
    tenant: T,
    key: K,
    status: 'completed',
    attempt: 2,
    maxAttempts: 5,
    leaseHeld: false,
    inFlight: false,
    request: { amount_cents: 1234 },
    fingerprint: 'f',
    principal: 'sim',
    scopes: [],
    generation: '1',
    result: RESULT,
    resultText: JSON.stringify(RESULT),
    settledAttempt: 2,
    error: null,
    deadLettered: false,
    redriveCount: 0,
    ...change,
  };
}

function payout(attempt: number, payoutId: string, credited: boolean, amountCents = 1234): PayoutRow {
  return { tenant: T, key: K, attempt, payoutId, amountCents, bindingGeneration: 1, credited };
}

function cleanHistory(): History {
  return {
    intended: [{ tenant: T, key: K, amountCents: 1234, bindingGeneration: 1 }],
    told: [
      told({ call: 'claim', outcome: 'acquired', fault: 'crash-after-effect', answer: { outcome: 'acquired', attempt: 1 } }),
      told({ call: 'claim', outcome: 'acquired', answer: { outcome: 'acquired', attempt: 2 } }),
      told({ call: 'complete', outcome: 'settled', attempt: 2, answer: { outcome: 'settled', result: RESULT } }),
      told({
        call: 'claim',
        outcome: 'conflict',
        submission: 'different-payload',
        fault: 'different-payload',
        answer: { outcome: 'conflict', conflictOn: ['request'], result: null, fingerprint: null },
      }),
      told({ call: 'claim', outcome: 'replay', submission: 'duplicate', answer: { outcome: 'replay', result: RESULT } }),
    ],
    operations: [operation()],
    attempts: [attempt(1, null, false, 'lease_expired'), attempt(2, 'completed', true, 'observed')],
    audit: [
      audit(1, 'claim', 'acquired', null, 'running'),
      audit(2, 'claim', 'in_progress', 'running', 'running'),
      audit(3, 'expire', 'expired', 'running', 'pending'),
      audit(4, 'claim', 'acquired', 'pending', 'running'),
      audit(5, 'complete', 'settled', 'running', 'completed'),
      audit(6, 'claim', 'conflict', 'completed', 'completed'),
    ],
    payouts: [payout(1, 'p-1', true), payout(2, 'p-2', false)],
  };
}

function failedInvariants(history: History): InvariantName[] {
  return checkHistory(history).invariants.filter((i) => !i.ok).map((i) => i.name);
}

describe('checkHistory', () => {
  it('passes a clean history and checks every invariant', () => {
    const report = checkHistory(cleanHistory());
    expect(report.invariants.map((i) => i.name)).toEqual(INVARIANTS.map((i) => i.name));
    expect(report.invariants.filter((i) => !i.ok)).toEqual([]);
    expect(report.ok).toBe(true);
    for (const invariant of report.invariants) expect(invariant.checked).toBeGreaterThan(0);
  });

  it('a double payout fails no-double-pay', () => {
    const history = cleanHistory();
    const doubled = { ...history, payouts: [payout(1, 'p-1', true), payout(2, 'p-2', true)] };
    expect(failedInvariants(doubled)).toEqual(['no-double-pay']);
    const line = checkHistory(doubled).invariants.find((i) => i.name === 'no-double-pay')?.violations[0];
    expect(line).toBe('sim-t0/op-000001: 2 credited payouts (attempts 1, 2)');
  });

  it('a downgrade in the audit trail fails status-monotonic', () => {
    const history = cleanHistory();
    const downgraded = { ...history, audit: [...history.audit, audit(7, 'report_unknown', 'recorded', 'completed', 'unknown')] };
    expect(failedInvariants(downgraded)).toEqual(['status-monotonic']);
  });

  it('a lock-free claim answer read before a transition may land after it, but only with a status the trail reached', () => {
    const history = cleanHistory();
    const stale = { ...history, audit: [...history.audit, audit(7, 'claim', 'in_progress', 'running', 'running')] };
    expect(failedInvariants(stale)).toEqual([]);
    const invented = { ...history, audit: [...history.audit, audit(7, 'claim', 'conflict', 'unknown', 'unknown')] };
    expect(failedInvariants(invented)).toEqual(['status-monotonic']);
  });

  it('a downgrade across rows (later row shows a lower status) fails status-monotonic', () => {
    const history = cleanHistory();
    const downgraded = { ...history, audit: [...history.audit, audit(7, 'heartbeat', 'fenced', 'running', 'running')] };
    expect(failedInvariants(downgraded)).toEqual(['status-monotonic']);
  });

  it('redrive is the one allowed drop', () => {
    const history = cleanHistory();
    const redriven = {
      ...history,
      audit: [
        audit(1, 'claim', 'acquired', null, 'running'),
        audit(2, 'expire', 'dead_lettered', 'running', 'failed'),
        audit(3, 'redrive', 'redriven', 'failed', 'pending'),
        audit(4, 'claim', 'acquired', 'pending', 'running'),
        audit(5, 'complete', 'settled', 'running', 'completed'),
      ],
    };
    expect(failedInvariants(redriven)).toEqual([]);
  });

  it('a lost settlement (paid, answered settled, record not completed) fails acknowledged-completion-durable', () => {
    const history = cleanHistory();
    const lost = {
      ...history,
      told: history.told.filter((t) => t.outcome !== 'replay'),
      operations: [operation({ status: 'failed', settledAttempt: null, result: null, resultText: null, deadLettered: true })],
      attempts: history.attempts.map((a) => ({ ...a, settled: false })),
    };
    expect(failedInvariants(lost)).toEqual(['acknowledged-completion-durable']);
  });

  it('a settlement without its payout fails no-lost-payout', () => {
    const history = cleanHistory();
    expect(failedInvariants({ ...history, payouts: [payout(2, 'p-2', false)] })).toEqual(['no-lost-payout']);
  });

  it('two settled attempts, or a replay of another result, fail single-settlement', () => {
    const history = cleanHistory();
    const twice = { ...history, attempts: history.attempts.map((a) => ({ ...a, settled: true, observation: 'completed' as const })) };
    expect(failedInvariants(twice)).toEqual(['single-settlement']);
    const otherReplay = {
      ...history,
      told: [...history.told, told({ call: 'claim', outcome: 'replay', answer: { outcome: 'replay', result: { ...RESULT, payout_id: 'p-9' } } })],
    };
    expect(failedInvariants(otherReplay)).toEqual(['single-settlement']);
  });

  it('a disclosed conflict fails conflict-discloses-nothing', () => {
    const history = cleanHistory();
    const disclosed = {
      ...history,
      told: [
        ...history.told,
        told({
          call: 'claim',
          outcome: 'conflict',
          submission: 'binding-bump',
          fault: 'binding-bump',
          answer: { outcome: 'conflict', conflictOn: ['binding'], status: 'completed', result: RESULT },
        }),
      ],
    };
    expect(failedInvariants(disclosed)).toEqual(['conflict-discloses-nothing']);
    const line = checkHistory(disclosed).invariants.find((i) => i.name === 'conflict-discloses-nothing')?.violations[0];
    expect(line).toBe('sim-t0/op-000001: a conflict answer to claim disclosed status, result');
  });

  it('a conflicting request that was executed fails conflict-discloses-nothing', () => {
    const history = cleanHistory();
    const executed = {
      ...history,
      told: [...history.told, told({ call: 'claim', outcome: 'acquired', submission: 'different-payload', answer: { outcome: 'acquired' } })],
      payouts: [...history.payouts, payout(3, 'p-3', false, 9999)],
    };
    expect(failedInvariants(executed)).toEqual(['conflict-discloses-nothing']);
    expect(checkHistory(executed).invariants.find((i) => i.name === 'conflict-discloses-nothing')?.violationCount).toBe(2);
  });

  it('an operation left running fails every-operation-final', () => {
    const history = cleanHistory();
    const stuck = {
      ...history,
      told: history.told.filter((t) => t.call === 'claim' && t.outcome !== 'replay'),
      operations: [operation({ status: 'running', settledAttempt: null, result: null, resultText: null, leaseHeld: true, inFlight: true })],
      attempts: history.attempts.map((a) => ({ ...a, settled: false })),
      payouts: [],
      audit: history.audit.slice(0, 4),
    };
    expect(failedInvariants(stuck)).toEqual(['every-operation-final']);
  });
});
