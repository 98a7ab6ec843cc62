import { describe, expect, it } from 'vitest';
import { checkHistory, INVARIANTS, type InvariantName } from '../../src/simulator/checker.js';
import type { AttemptRow, AuditRow, OperationRow } from '../../src/checker/engine-state.js';
import type { Status } from '../../src/client/types.js';
import type { DeliveryRow, History, PayoutRow, ToldAnswer } from '../../src/simulator/history.js';

// Hand-built histories: one operation paid and settled cleanly by attempt 2 after attempt 1
// crashed after its effect (the idempotent downstream answered attempt 2 with attempt 1's
// payout), plus a conflicting retry that was refused.
const T = 'sim-t0';
const K = 'op-000001';
const RESULT = { payout_id: 'p-1', amount_cents: 1234, credited_by_attempt: 1 };

function told(partial: Partial<ToldAnswer> & Pick<ToldAnswer, 'call' | 'outcome'>): ToldAnswer {
  return {
    tenant: T,
    key: K,
    submission: 'original',
    fault: null,
    attempt: null,
    answer: { outcome: partial.outcome },
    ...partial,
  };
}

function audit(auditId: number, event: string, outcome: string, before: Status | null, after: Status | null): AuditRow {
  return {
    tenant: T,
    key: K,
    auditId: String(auditId),
    event,
    outcome,
    attempt: 1,
    statusBefore: before,
    statusAfter: after,
    detail: {},
    endedLiveLease: false,
  };
}

function attempt(n: number, observation: Status | null, settled: boolean, endReason: string): AttemptRow {
  return {
    tenant: T,
    key: K,
    attempt: n,
    observation,
    settled,
    endReason,
    error: null,
    retryable: null,
    lateResult: null,
  };
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
      told({
        call: 'claim',
        outcome: 'acquired',
        fault: 'crash-after-effect',
        answer: { outcome: 'acquired', attempt: 1 },
      }),
      told({ call: 'claim', outcome: 'acquired', answer: { outcome: 'acquired', attempt: 2 } }),
      told({ call: 'complete', outcome: 'settled', attempt: 2, answer: { outcome: 'settled', result: RESULT } }),
      told({
        call: 'claim',
        outcome: 'conflict',
        submission: 'different-payload',
        fault: 'different-payload',
        answer: { outcome: 'conflict', conflictOn: ['request'], result: null, fingerprint: null },
      }),
      told({
        call: 'claim',
        outcome: 'replay',
        submission: 'duplicate',
        answer: { outcome: 'replay', result: RESULT },
      }),
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
    deliveries: [delivery('d1', 'completed', '1')],
    consumers: ['rewards'],
  };
}

function delivery(
  deliveryId: string,
  status: 'completed' | 'failed',
  eventId: string | null,
  consumer = 'rewards',
): DeliveryRow {
  return {
    consumer,
    tenant: T,
    key: K,
    eventId,
    status,
    credited: status === 'completed',
    deliveryId: deliveryId.replace(/^d/, ''),
  };
}

function failedInvariants(history: History): InvariantName[] {
  return checkHistory(history)
    .invariants.filter((i) => !i.ok)
    .map((i) => i.name);
}

describe('checkHistory', () => {
  it('passes a clean history and checks every invariant', () => {
    const report = checkHistory(cleanHistory());
    expect(report.invariants.map((i) => i.name)).toEqual(INVARIANTS.map((i) => i.name));
    expect(report.invariants.filter((i) => !i.ok)).toEqual([]);
    expect(report.ok).toBe(true);
    // resolution-final judges resolved operations only (resolvedHistory below).
    for (const invariant of report.invariants.filter((i) => i.name !== 'resolution-final'))
      expect(invariant.checked).toBeGreaterThan(0);
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
    const downgraded = {
      ...history,
      audit: [...history.audit, audit(7, 'report_unknown', 'recorded', 'completed', 'unknown')],
    };
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
      // Two final outcomes (failed, then completed after the redrive): two deliveries, one credit.
      deliveries: [delivery('d1', 'failed', '1'), delivery('d2', 'completed', '2')],
    };
    expect(failedInvariants(redriven)).toEqual([]);
    expect(failedInvariants({ ...redriven, deliveries: [delivery('d2', 'completed', '2')] })).toEqual([
      'feed-exactly-once',
    ]);
  });

  it('a lost settlement (paid, answered settled, record not completed) fails acknowledged-completion-durable', () => {
    const history = cleanHistory();
    const lost = {
      ...history,
      told: history.told.filter((t) => t.outcome !== 'replay'),
      operations: [
        operation({ status: 'failed', settledAttempt: null, result: null, resultText: null, deadLettered: true }),
      ],
      attempts: history.attempts.map((a) => ({ ...a, settled: false })),
      consumers: [],
    };
    expect(failedInvariants(lost)).toEqual(['acknowledged-completion-durable']);
  });

  it('a settlement without its payout fails no-lost-payout', () => {
    const history = cleanHistory();
    expect(failedInvariants({ ...history, payouts: [payout(2, 'p-2', false)] })).toEqual(['no-lost-payout']);
  });

  it('two settled attempts, or a replay of another result, fail single-settlement', () => {
    const history = cleanHistory();
    const twice = {
      ...history,
      attempts: history.attempts.map((a) => ({ ...a, settled: true, observation: 'completed' as const })),
    };
    expect(failedInvariants(twice)).toEqual(['single-settlement']);
    const otherReplay = {
      ...history,
      told: [
        ...history.told,
        told({
          call: 'claim',
          outcome: 'replay',
          answer: { outcome: 'replay', result: { ...RESULT, payout_id: 'p-9' } },
        }),
      ],
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
      told: [
        ...history.told,
        told({ call: 'claim', outcome: 'acquired', submission: 'different-payload', answer: { outcome: 'acquired' } }),
      ],
      payouts: [...history.payouts, payout(3, 'p-3', false, 9999)],
    };
    expect(failedInvariants(executed)).toEqual(['conflict-discloses-nothing']);
    expect(checkHistory(executed).invariants.find((i) => i.name === 'conflict-discloses-nothing')?.violationCount).toBe(
      2,
    );
  });

  it('an operation left running fails every-operation-final', () => {
    const history = cleanHistory();
    const stuck = {
      ...history,
      told: history.told.filter((t) => t.call === 'claim' && t.outcome !== 'replay'),
      operations: [
        operation({
          status: 'running',
          settledAttempt: null,
          result: null,
          resultText: null,
          leaseHeld: true,
          inFlight: true,
        }),
      ],
      attempts: history.attempts.map((a) => ({ ...a, settled: false })),
      payouts: [],
      audit: history.audit.slice(0, 4),
      deliveries: [],
    };
    expect(failedInvariants(stuck)).toEqual(['every-operation-final']);
  });

  it('a double delivery (the same event applied twice) or a lost one fails feed-exactly-once; the naive poller is not judged', () => {
    const history = cleanHistory();
    const twice = { ...history, deliveries: [delivery('d1', 'completed', '1'), delivery('d2', 'completed', '1')] };
    expect(failedInvariants(twice)).toEqual(['feed-exactly-once']);
    const lines = checkHistory(twice).invariants.find((i) => i.name === 'feed-exactly-once')?.violations;
    expect(lines).toEqual([
      'sim-t0/op-000001: event 1 was delivered 2 times to rewards',
      "sim-t0/op-000001: rewards received [completed, completed], the trail's final outcomes are [completed]",
      'sim-t0/op-000001: completed, credited 2 times by rewards',
    ]);
    expect(failedInvariants({ ...history, deliveries: [] })).toEqual(['feed-exactly-once']);
    // The naive poller's rows (missing, or twice) are the baseline's defects, not the engine's.
    const naive = {
      ...history,
      deliveries: [
        ...history.deliveries,
        delivery('d2', 'completed', null, 'naive'),
        delivery('d3', 'completed', null, 'naive'),
      ],
    };
    expect(failedInvariants(naive)).toEqual([]);
  });
});

// An operation that lost its outcome (attempts 1 and 2 reported unknown, the budget spent:
// dead-lettered needs_reconciliation) and that settle.resolve completed through attempt 3.
function resolvedHistory(): History {
  const resolvedResult = { payout_id: 'p-1', amount_cents: 1234, credited_by_attempt: 1 };
  const resolveRow = (auditId: number): AuditRow => ({
    ...audit(auditId, 'resolve', 'resolved', 'unknown', 'completed'),
    attempt: 3,
    actor: 'settle_admin_login',
    detail: {
      asserted: 'completed',
      reason: 'reconciler: the provider has the payout',
      evidence: { provider_payout_id: 'p-1' },
    },
  });
  return {
    intended: [{ tenant: T, key: K, amountCents: 1234, bindingGeneration: 1 }],
    told: [
      told({ call: 'claim', outcome: 'acquired', answer: { outcome: 'acquired', attempt: 1 } }),
      told({
        call: 'reportUnknown',
        outcome: 'recorded',
        attempt: 1,
        answer: { outcome: 'recorded', reason: 'outcome_unknown' },
      }),
      told({ call: 'claim', outcome: 'acquired', answer: { outcome: 'acquired', attempt: 2 } }),
      told({
        call: 'reportUnknown',
        outcome: 'recorded',
        attempt: 2,
        answer: { outcome: 'recorded', reason: 'needs_reconciliation' },
      }),
      told({ call: 'claim', outcome: 'replay', answer: { outcome: 'replay', result: resolvedResult } }),
    ],
    operations: [
      operation({ attempt: 3, settledAttempt: 3, result: resolvedResult, resultText: JSON.stringify(resolvedResult) }),
    ],
    attempts: [
      attempt(1, 'unknown', false, 'observed'),
      attempt(2, 'unknown', false, 'observed'),
      attempt(3, 'completed', true, 'observed'),
    ],
    audit: [
      audit(1, 'claim', 'acquired', null, 'running'),
      audit(2, 'report_unknown', 'recorded', 'running', 'unknown'),
      audit(3, 'claim', 'acquired', 'unknown', 'unknown'),
      audit(4, 'report_unknown', 'recorded', 'unknown', 'unknown'),
      resolveRow(5),
      { ...audit(6, 'complete', 'settled', 'unknown', 'completed'), attempt: 3, detail: { reason: 'resolved' } },
    ],
    payouts: [payout(1, 'p-1', true)],
    deliveries: [delivery('d1', 'completed', '7')],
    consumers: ['rewards'],
  };
}

describe('checkHistory and resolutions', () => {
  it('a completed resolution settles once, through its own attempt, with no complete answered settled', () => {
    const report = checkHistory(resolvedHistory());
    expect(report.invariants.filter((i) => !i.ok)).toEqual([]);
    expect(report.invariants.find((i) => i.name === 'resolution-final')?.checked).toBe(1);
  });

  it('a complete answered settled besides the resolution fails single-settlement', () => {
    const history = resolvedHistory();
    const settledToo = {
      ...history,
      told: [
        ...history.told,
        told({ call: 'complete', outcome: 'settled', attempt: 2, answer: { outcome: 'settled' } }),
      ],
    };
    expect(failedInvariants(settledToo)).toContain('single-settlement');
  });

  it('a resolution lowered afterwards fails resolution-final (and status-monotonic)', () => {
    const history = resolvedHistory();
    const lowered = {
      ...history,
      audit: [...history.audit, audit(7, 'report_unknown', 'recorded', 'completed', 'unknown')],
      operations: [operation({ status: 'unknown', attempt: 3, settledAttempt: null, result: null, resultText: null })],
      attempts: history.attempts.map((a) => ({ ...a, settled: false })),
      deliveries: [],
      consumers: [],
      payouts: [],
      told: history.told.filter((t) => t.outcome !== 'replay'),
    };
    const failed = failedInvariants(lowered);
    expect(failed).toContain('resolution-final');
    const lines = checkHistory(lowered).invariants.find((i) => i.name === 'resolution-final')?.violations;
    expect(lines).toEqual([
      'sim-t0/op-000001: resolved completed, but the operation is unknown',
      'sim-t0/op-000001: resolved completed, then audit 7 (report_unknown recorded) lowered it to unknown',
    ]);
  });

  it('a resolution without who, why or evidence fails resolution-final', () => {
    const history = resolvedHistory();
    const unaudited = {
      ...history,
      audit: history.audit.map((row) =>
        row.event === 'resolve' ? { ...row, actor: null, detail: { asserted: 'completed', reason: ' ' } } : row,
      ),
    };
    expect(failedInvariants(unaudited)).toEqual(['resolution-final']);
    expect(checkHistory(unaudited).invariants.find((i) => i.name === 'resolution-final')?.violations).toEqual([
      'sim-t0/op-000001: the resolution (audit 5) records no who, why, evidence',
    ]);
  });

  it('a second final outcome after a failed resolution fails resolution-final and feed-exactly-once if delivered once', () => {
    const history = resolvedHistory();
    const failedThenCompleted = {
      ...history,
      audit: [
        ...history.audit.slice(0, 4),
        { ...history.audit[4]!, statusAfter: 'failed' as const, detail: { reason: 'no payout', evidence: {} } },
        audit(6, 'complete', 'settled', 'failed', 'completed'),
      ],
    };
    const failed = failedInvariants(failedThenCompleted);
    expect(failed).toContain('resolution-final');
    expect(failed).toContain('feed-exactly-once');
  });
});
