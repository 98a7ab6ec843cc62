import { describe, expect, it } from 'vitest';
import { secondWaitsForFirst } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation, storedAttempts } from './support/inspect.js';
import { fingerprintOf, supersededPair } from './support/scenarios.js';
import { acquire, claim, complete, fail, reportUnknown } from './support/settle.js';

// Orders A, B and C of monotonic-settlement-skill.md. Where two attempts race, session one
// holds the operation row lock in an open transaction and session two is seen queued behind it.
const db = useEngineDatabase('settlement_orders');

async function sessions() {
  const [one, two, admin] = await Promise.all([db.app(), db.app(), db.connect()]);
  return { one, two, admin, observer: admin };
}

const RESULT = { receipt: 'r-77', amount: '10.00' };
const OTHER_REQUEST = { amount: '999.00', currency: 'EUR', to: 'acct-666' };

describe('Order A: success first, timeout second (matching lock)', () => {
  it('same attempt: the later unknown answers already_settled and completed stays', async () => {
    const { one, admin } = await sessions();
    const ticket = await acquire(one, newOperation('order-a'));
    expect((await complete(one, ticket, RESULT)).outcome).toBe('settled');
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);

    const late = await reportUnknown(one, ticket);
    expect(late).toMatchObject({ outcome: 'already_settled', reason: 'attempt_already_observed', status: 'completed' });
    const after = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(after.row_text).toBe(before.row_text);
    expect(after.result).toEqual(RESULT);
  });

  it('racing attempts: the timeout queued behind the success is fenced and replays nothing new', async () => {
    const s = await sessions();
    const op = newOperation('order-a-race');
    const [old, current] = await supersededPair(s.one, s.admin, op);
    const [settled, unknown] = await secondWaitsForFirst(
      s,
      (one) => complete(one, current, RESULT),
      (two) => reportUnknown(two, old),
    );
    expect(settled).toMatchObject({ outcome: 'settled', reason: 'current_attempt', settled_attempt: 2 });
    expect(unknown).toMatchObject({ outcome: 'fenced', reason: 'settled', status: 'completed', result: RESULT });
    const stored = await mustGetOperation(s.admin, current.tenant, current.key);
    expect(stored).toMatchObject({ status: 'completed', result: RESULT, settled_attempt: 2 });
    const replay = await claim(s.one, op);
    expect(replay).toMatchObject({ outcome: 'replay', result: RESULT, settled_attempt: 2 });
  });
});

describe('Order B: timeout first, success second (matching lock)', () => {
  it('same attempt: unknown, then its success upgrades to completed with the result', async () => {
    const { one, admin } = await sessions();
    const ticket = await acquire(one, newOperation('order-b'));
    expect(await reportUnknown(one, ticket)).toMatchObject({
      outcome: 'recorded',
      reason: 'outcome_unknown',
      status: 'unknown',
    });
    const success = await complete(one, ticket, RESULT);
    expect(success).toMatchObject({ outcome: 'settled', status: 'completed', result: RESULT, settled_attempt: 1 });
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'completed',
      result: RESULT,
    });
  });

  it('racing attempts: the success queued behind the timeout settles', async () => {
    const s = await sessions();
    const [old, current] = await supersededPair(s.one, s.admin, newOperation('order-b-race'));
    const [unknown, success] = await secondWaitsForFirst(
      s,
      (one) => reportUnknown(one, current),
      (two) => complete(two, old, RESULT),
    );
    expect(unknown).toMatchObject({ outcome: 'recorded', status: 'unknown' });
    expect(success).toMatchObject({
      outcome: 'settled',
      reason: 'superseded_attempt',
      status: 'completed',
      result: RESULT,
      settled_attempt: 1,
    });
    expect(await mustGetOperation(s.admin, old.tenant, old.key)).toMatchObject({
      status: 'completed',
      result: RESULT,
      settled_attempt: 1,
    });
  });
});

describe('Order C: late success with a mismatched fingerprint or binding generation', () => {
  it('at claim: a different request or binding generation conflicts and opens no attempt', async () => {
    const { one, admin } = await sessions();
    const op = newOperation('order-c-claim');
    const ticket = await acquire(one, op);
    await reportUnknown(one, ticket);

    const byRequest = await claim(one, { ...op, request: OTHER_REQUEST });
    const byGeneration = await claim(one, { ...op, binding_generation: 2 });
    expect(byRequest).toMatchObject({
      outcome: 'conflict',
      conflict_on: ['request'],
      status: null,
      result: null,
      fingerprint: null,
    });
    expect(byGeneration).toMatchObject({ outcome: 'conflict', conflict_on: ['binding'], status: null, result: null });
    expect(await storedAttempts(admin, ticket.tenant, ticket.key)).toHaveLength(1);
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({ status: 'unknown', attempt: 1 });
  });

  const mismatches = [
    { part: 'request', label: 'fingerprint' },
    { part: 'binding_generation', label: 'binding generation' },
  ] as const;

  for (const { part, label } of mismatches) {
    it(`at settle, mismatched ${label}: no upgrade, no result, canonical moves to conflict, caller sees nothing`, async () => {
      const s = await sessions();
      const op = newOperation(`order-c-${part}`);
      const [old, current] = await supersededPair(s.one, s.admin, op);
      const wrong =
        part === 'request'
          ? { ...old, fingerprint: await fingerprintOf(s.admin, OTHER_REQUEST) }
          : { ...old, binding_generation: 2 };

      const [unknown, late] = await secondWaitsForFirst(
        s,
        (one) => reportUnknown(one, current),
        (two) => complete(two, wrong, { receipt: 'for-another-intent' }),
      );
      expect(unknown).toMatchObject({ outcome: 'recorded', status: 'unknown' });
      expect(late).toEqual({
        outcome: 'conflict',
        reason: 'lock_mismatch',
        conflict_on: [part === 'request' ? 'request' : 'binding'],
        status: null,
        attempt: null,
        settled_attempt: null,
        result: null,
        result_text: null,
        error: null,
        dead_lettered: null,
        dead_letter_reason: null,
      });
      const stored = await mustGetOperation(s.admin, op.tenant as string, op.key as string);
      expect(stored).toMatchObject({
        status: 'conflict',
        result: null,
        settled_attempt: null,
        fingerprint: old.fingerprint,
      });
      const attempts = await storedAttempts(s.admin, old.tenant, old.key);
      expect(attempts.filter((a) => a.settled)).toHaveLength(0);
      expect(attempts[0]).toMatchObject({ observation: 'conflict', late_result: null });
      const audit = await auditTrail(s.admin, old.tenant, old.key);
      expect(audit.at(-1)).toMatchObject({ event: 'complete', outcome: 'conflict', status_after: 'conflict' });

      // Callers with the reserved request never receive the other intent's result.
      const retry = await claim(s.one, op);
      expect(retry.result).toBeNull();
      expect(['acquired', 'in_progress']).toContain(retry.outcome);
    });
  }

  it('a mismatched success of the current attempt releases its lease: its later fail or unknown is fenced', async () => {
    const { one, admin } = await sessions();
    const op = newOperation('order-c-release');
    const ticket = await acquire(one, op);
    const wrong = { ...ticket, fingerprint: await fingerprintOf(admin, OTHER_REQUEST) };
    expect(await complete(one, wrong, { receipt: 'other' })).toMatchObject({ outcome: 'conflict' });
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'conflict',
      lease_token: null,
    });
    expect(await fail(one, ticket, { code: 'e' }, false)).toMatchObject({
      outcome: 'fenced',
      reason: 'attempt_conflicted',
    });
    expect(await reportUnknown(one, ticket)).toMatchObject({ outcome: 'fenced', reason: 'attempt_conflicted' });
    expect(await mustGetOperation(admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'conflict',
      result: null,
    });
  });

  // Found by lattice-property.test.ts. Engine bug: when the operation is already `conflict`,
  // a mismatched success of the current attempt ends the attempt (ended_at, 'observed') but
  // leaves the operation's lease in place, so that attempt's next fail/report_unknown tries to
  // end it again and the guard trigger aborts the call with SE024 instead of answering.
  it('the same holds when the operation was already conflict (a later attempt mismatches again)', async () => {
    const { one, admin } = await sessions();
    const op = newOperation('order-c-again', { max_attempts: 3 });
    const wrongFingerprint = await fingerprintOf(admin, OTHER_REQUEST);
    const first = await acquire(one, op);
    await complete(one, { ...first, fingerprint: wrongFingerprint }, { receipt: 'other' });
    const second = await acquire(one, op);
    expect(second.attempt).toBe(2);
    expect(await complete(one, { ...second, fingerprint: wrongFingerprint }, { receipt: 'other' })).toMatchObject({
      outcome: 'conflict',
    });
    expect(await mustGetOperation(admin, second.tenant, second.key)).toMatchObject({
      status: 'conflict',
      lease_token: null,
    });
    expect(await fail(one, second, { code: 'e' }, false)).toMatchObject({
      outcome: 'fenced',
      reason: 'attempt_conflicted',
    });
    expect(await reportUnknown(one, second)).toMatchObject({ outcome: 'fenced', reason: 'attempt_conflicted' });
  });

  it('a mismatched late success after completion changes nothing: status, result and settlement stay', async () => {
    const { one, admin } = await sessions();
    const op = newOperation('order-c-after');
    const ticket = await acquire(one, op);
    await complete(one, ticket, RESULT);
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);

    const byGeneration = await complete(one, { ...ticket, binding_generation: 9 }, { receipt: 'stale-binding' });
    const byRequest = await complete(
      one,
      { ...ticket, fingerprint: await fingerprintOf(admin, OTHER_REQUEST) },
      { receipt: 'x' },
    );
    expect(byGeneration).toMatchObject({ outcome: 'conflict', conflict_on: ['binding'], result: null, status: null });
    expect(byRequest).toMatchObject({ outcome: 'conflict', conflict_on: ['request'], result: null, status: null });
    const after = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(after.row_text).toBe(before.row_text);
  });
});
