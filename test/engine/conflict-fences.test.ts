import { describe, expect, it } from 'vitest';
import { secondWaitsForFirst } from './support/barrier.js';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { auditTrail, mustGetOperation, storedAttempts } from './support/inspect.js';
import { fingerprintOf } from './support/scenarios.js';
import { acquire, claim, complete, fail, reportUnknown, type Ticket } from './support/settle.js';

// An attempt that presented a mismatched observation (fingerprint or binding:
// conflict) is done. It is fenced from then on and can never settle by presenting the right
// lock afterwards with what it did for another intent.
const db = useEngineDatabase('conflict_fences');

const OTHER_REQUEST = { amount: '999.00', to: 'elsewhere' };

async function sessions() {
  const [one, two, observer, admin] = await Promise.all([db.app(), db.app(), db.connect(), db.connect()]);
  return { one, two, observer, admin };
}

describe('a mismatched observation fences its attempt', () => {
  it('complete with F2 -> conflict, then complete with F1 and the same result -> fenced, nothing settles', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const op = newOperation('issue-f2-f1');
    const ticket = await acquire(app, op);
    const wrong: Ticket = { ...ticket, fingerprint: await fingerprintOf(admin, OTHER_REQUEST) };
    expect(await complete(app, wrong, { receipt: 'R2' })).toMatchObject({
      outcome: 'conflict',
      reason: 'lock_mismatch',
      conflict_on: ['request'],
    });
    expect(await complete(app, ticket, { receipt: 'R2' })).toMatchObject({
      outcome: 'fenced',
      reason: 'attempt_conflicted',
      status: 'conflict',
      result: null,
      settled_attempt: null,
    });
    const stored = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(stored).toMatchObject({ status: 'conflict', result: null, settled_attempt: null, lease_token: null });
    expect((await storedAttempts(admin, ticket.tenant, ticket.key))[0]).toMatchObject({
      observation: 'conflict',
      settled: false,
      late_result: null,
    });
    expect(
      (await auditTrail(admin, ticket.tenant, ticket.key)).map((r) => [
        r.event,
        r.outcome,
        r.detail && (r.detail as { reason?: string }).reason,
      ]),
    ).toContainEqual(['complete', 'fenced', 'attempt_conflicted']);
    // The reserved request's callers never receive R2; a new attempt may still settle.
    const next = await acquire(app, op);
    expect(next.attempt).toBe(2);
    expect(await complete(app, next, { receipt: 'R1' })).toMatchObject({
      outcome: 'settled',
      settled_attempt: 2,
      result: { receipt: 'R1' },
    });
  });

  it('a mismatched binding on fail or report_unknown also ends the attempt: its lease is released, its later success is fenced', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    for (const kind of ['fail', 'unknown'] as const) {
      const op = newOperation(`mismatch-${kind}`);
      const ticket = await acquire(app, op);
      const stale: Ticket = { ...ticket, binding_generation: 2 };
      const answer = kind === 'fail' ? await fail(app, stale, { code: 'x' }, true) : await reportUnknown(app, stale);
      expect(answer).toMatchObject({ outcome: 'conflict', conflict_on: ['binding'] });
      const after = await mustGetOperation(admin, ticket.tenant, ticket.key);
      expect(after).toMatchObject({ status: 'pending', lease_token: null });
      expect(await complete(app, ticket, { receipt: 'late' })).toMatchObject({
        outcome: 'fenced',
        reason: 'attempt_conflicted',
      });
      expect(await claim(app, op)).toMatchObject({ outcome: 'acquired', attempt: 2 });
    }
  });

  it('no writer can turn a conflicted attempt into a completed one (SE024, superuser included)', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('guard-conflict'));
    await complete(app, { ...ticket, binding_generation: 5 }, { other: true });
    expect(
      await sqlStateOf(
        admin.query(
          `update settle_private.attempts set observation = 'completed', late_result = '{}' where tenant = $1 and key = $2 and attempt = 1`,
          [ticket.tenant, ticket.key],
        ),
      ),
    ).toBe('SE024');
  });
});

describe('racing connections on one attempt', () => {
  it('mismatched complete first, matching complete queued behind it: the matching one is fenced', async () => {
    const s = await sessions();
    const ticket = await acquire(s.one, newOperation('race-mismatch-first'));
    const wrong: Ticket = { ...ticket, fingerprint: await fingerprintOf(s.admin, OTHER_REQUEST) };
    const [first, second] = await secondWaitsForFirst(
      s,
      (one) => complete(one, wrong, { receipt: 'R2' }),
      (two) => complete(two, ticket, { receipt: 'R2' }),
    );
    expect(first).toMatchObject({ outcome: 'conflict' });
    expect(second).toMatchObject({ outcome: 'fenced', reason: 'attempt_conflicted' });
    expect(await mustGetOperation(s.admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'conflict',
      result: null,
    });
  });

  it('matching complete first, mismatched one queued behind it: settled, then conflict without touching the result', async () => {
    const s = await sessions();
    const ticket = await acquire(s.one, newOperation('race-match-first'));
    const wrong: Ticket = { ...ticket, fingerprint: await fingerprintOf(s.admin, OTHER_REQUEST) };
    const [first, second] = await secondWaitsForFirst(
      s,
      (one) => complete(one, ticket, { receipt: 'R1' }),
      (two) => complete(two, wrong, { receipt: 'R2' }),
    );
    expect(first).toMatchObject({ outcome: 'settled', result: { receipt: 'R1' } });
    expect(second).toMatchObject({ outcome: 'conflict', result: null, status: null });
    expect(await mustGetOperation(s.admin, ticket.tenant, ticket.key)).toMatchObject({
      status: 'completed',
      result: { receipt: 'R1' },
    });
  });
});
