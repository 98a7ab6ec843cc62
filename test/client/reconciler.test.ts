import { describe, expect, it } from 'vitest';
import {
  createReconciler,
  type Json,
  NotReconcilableError,
  type ReconcileCandidate,
  type ReconcileDecision,
  resolveOperation,
  ResolveEvidenceStaleError,
  ResolveFingerprintMismatchError,
  SettleInputError,
} from '../../src/index.js';
import { expireLease } from '../../src/testing/clock.js';
import { verdict } from '../../examples/reconcile.js';
import { binding, useClientTest, uniqueKey } from './helpers.js';

// The client's reconciler. Two reconcilers (two clients with their own pools and
// holders, as two processes would be) share the operations needing reconciliation through the
// engine's reconciler leases; a downstream that never answers leaves its operations undecided.
const t = useClientTest('client_reconciler');
const tenant = 'acme';

/** An operation whose only attempt lost its response: unknown, dead-lettered needs_reconciliation. */
async function needsReconciliation(label: string): Promise<string> {
  const key = uniqueKey(label);
  const claim = await t.app.claim({ tenant, key, request: { amount: '5.00', charge: key }, binding, maxAttempts: 1 });
  if (claim.outcome !== 'acquired') throw new Error(`claim answered ${claim.outcome}`);
  const answer = await t.app.reportUnknown(claim.attempt);
  expect(answer).toMatchObject({ outcome: 'recorded' });
  return key;
}

async function stateOf(key: string) {
  const { rows } = await t.su.query(
    `select status::text, result, error, dead_letter_reason from settle.operations where tenant = $1 and key = $2`,
    [tenant, key],
  );
  return rows[0] as { status: string; result: Json; error: Json; dead_letter_reason: string | null };
}

/** A promise and its resolver: a barrier the test opens. */
function barrier(): { promise: Promise<void>; open: () => void } {
  let open = () => {};
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('resolveOperation', () => {
  it('resolves with the reservation fingerprint; typed refusals; bad input never reaches the database', async () => {
    const reconcilerClient = t.client({ role: 'settle_reconciler' });
    const key = await needsReconciliation('one');
    const record = await t.admin.inspect({ tenant, key });
    if (record === null) throw new Error('no record');
    await expect(
      resolveOperation(reconcilerClient, {
        tenant,
        key,
        fingerprint: `v1:${'0'.repeat(64)}`,
        expectedAttempt: record.attempt,
        outcome: 'failed',
        error: {},
        reason: 'x',
      }),
    ).rejects.toBeInstanceOf(ResolveFingerprintMismatchError);
    await expect(
      resolveOperation(reconcilerClient, {
        tenant,
        key,
        fingerprint: record.fingerprint,
        expectedAttempt: record.attempt,
        outcome: 'failed',
        error: {},
        reason: ' ',
      }),
    ).rejects.toBeInstanceOf(SettleInputError);
    const answer = await resolveOperation(reconcilerClient, {
      tenant,
      key,
      fingerprint: record.fingerprint,
      expectedAttempt: record.attempt,
      outcome: 'completed',
      result: { charge: 'ch_1' },
      reason: 'INC-1',
      evidence: { psp: 'ref' },
    });
    expect(answer).toMatchObject({
      outcome: 'resolved',
      status: 'completed',
      statusBefore: 'unknown',
      settledAttempt: 2,
    });
    const again = await resolveOperation(reconcilerClient, {
      tenant,
      key,
      fingerprint: record.fingerprint,
      expectedAttempt: record.attempt,
      outcome: 'completed',
      result: { charge: 'ch_1' },
      reason: 'INC-1',
    });
    expect(again).toMatchObject({ outcome: 'already_final', matches: true });

    const running = uniqueKey('running');
    const claim = await t.app.claim({ tenant, key: running, request: { amount: '1.00' }, binding });
    if (claim.outcome !== 'acquired') throw new Error('not acquired');
    await expect(
      resolveOperation(reconcilerClient, {
        tenant,
        key: running,
        fingerprint: claim.attempt.fingerprint,
        expectedAttempt: 1,
        outcome: 'failed',
        error: {},
        reason: 'x',
      }),
    ).rejects.toBeInstanceOf(NotReconcilableError);
  });
});

describe('createReconciler', () => {
  it('two reconcilers share the work without overlap; a downstream that times out leaves its operations undecided', async () => {
    // The downstream: which charges exist, and one lookup that hangs (a timeout).
    const done = [await needsReconciliation('charged'), await needsReconciliation('charged')];
    const none = [await needsReconciliation('not-charged'), await needsReconciliation('not-charged')];
    const slow = [await needsReconciliation('hangs')];
    const all = [...done, ...none, ...slow];

    const checkedBy = new Map<string, string[]>();
    const firstBatchSeen = barrier();
    const releaseFirst = barrier();
    const downstream =
      (holder: string, hold: boolean) =>
      async (op: ReconcileCandidate, { signal }: { signal: AbortSignal }): Promise<ReconcileDecision | undefined> => {
        if (!all.includes(op.key)) return undefined; // another test's operation: leave it
        checkedBy.set(op.key, [...(checkedBy.get(op.key) ?? []), holder]);
        if (hold) {
          firstBatchSeen.open();
          await releaseFirst.promise;
        }
        if (slow.includes(op.key)) {
          // Never answers: the reconciler's timeout aborts it.
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
          return { outcome: 'completed', result: { too: 'late' } };
        }
        if (done.includes(op.key))
          return {
            outcome: 'completed',
            result: { charge: `ch_${op.key}` },
            evidence: { psp: op.key },
            reason: 'PSP shows the charge',
          };
        return { outcome: 'failed', error: { code: 'no_charge' }, reason: 'PSP has no charge' };
      };

    const errors: unknown[] = [];
    const a = createReconciler({
      client: t.client({ role: 'settle_reconciler' }),
      holder: 'reconciler-a',
      batchSize: 2,
      // Its first check is held at a barrier while B sweeps: its timeout outlasts B's sweep. (The
      // oldest dead letters come first, so A's batch is the two charged ones.)
      checkTimeoutMs: 120_000,
      retryAfterMs: 3_600_000,
      check: downstream('reconciler-a', true),
      onError: (error) => errors.push(error),
    });
    const b = createReconciler({
      client: t.client({ role: 'settle_reconciler' }),
      holder: 'reconciler-b',
      batchSize: 100,
      checkTimeoutMs: 1_000,
      retryAfterMs: 3_600_000,
      check: downstream('reconciler-b', false),
      onError: (error) => errors.push(error),
    });

    // A leases two operations and holds them inside its first check; B sweeps meanwhile.
    const sweepA = a.sweep();
    await firstBatchSeen.promise;
    const summaryB = await b.sweep();
    releaseFirst.open();
    const summaryA = await sweepA;

    const mineA = summaryA.operations.filter((o) => all.includes(o.key)).map((o) => o.key);
    const mineB = summaryB.operations.filter((o) => all.includes(o.key)).map((o) => o.key);
    expect(mineA.length).toBeGreaterThan(0);
    expect(mineA.filter((k) => mineB.includes(k))).toEqual([]);
    expect([...mineA, ...mineB].sort()).toEqual([...all].sort());
    for (const key of all) expect(checkedBy.get(key), key).toHaveLength(1);

    for (const key of done)
      expect(await stateOf(key)).toMatchObject({ status: 'completed', result: { charge: `ch_${key}` } });
    for (const key of none)
      expect(await stateOf(key)).toMatchObject({ status: 'failed', error: { code: 'no_charge' } });
    expect(await stateOf(slow[0] as string)).toMatchObject({
      status: 'unknown',
      dead_letter_reason: 'needs_reconciliation',
    });
    const results = [...summaryA.operations, ...summaryB.operations].filter((o) => all.includes(o.key));
    expect(results.find((o) => o.key === slow[0])?.result).toBe('check_timeout');
    expect(errors).toEqual([]);

    // The undecided one is not leased again before retryAfterMs.
    const later = await b.sweep();
    expect(later.operations.filter((o) => all.includes(o.key))).toEqual([]);

    // The resolutions are audited with the reconciler's reason and evidence.
    const { rows } = await t.su.query(
      `select key, detail from settle.audit_log where tenant = $1 and key = any($2::text[]) and event = 'resolve' order by key`,
      [tenant, done],
    );
    expect(rows).toHaveLength(2);
    expect(rows[0].detail.reason).toMatch(/^reconciler reconciler-[ab]: PSP shows the charge$/);
    expect(rows[0].detail.evidence).toMatchObject({
      checked_by: expect.stringMatching(/^reconciler-[ab]$/),
      checks: 1,
    });
  });
});

describe('createReconciler: a key the downstream has no record of', () => {
  it("a worker killed before it called the downstream: examples/reconcile.ts's verdict fails it, retries get the failure, a new key runs", async () => {
    const key = uniqueKey('killed');
    const request = { amount: '5.00', charge: key };
    const claimed = await t.app.claim({ tenant, key, request, binding, maxAttempts: 1 });
    if (claimed.outcome !== 'acquired') throw new Error(`claim answered ${claimed.outcome}`);
    // The worker dies here, before it calls the downstream: its lease lapses, nothing reported;
    // the sweeper dead-letters it (budget spent, the attempt may have taken effect).
    expect(await expireLease(t.su, tenant, key)).toBe(true);
    await t.admin.expireLeases();
    expect(await stateOf(key)).toMatchObject({ dead_letter_reason: 'needs_reconciliation' });
    // Until a verdict, every retry of the key is answered unknown and runs nothing.
    expect(await t.app.claim({ tenant, key, request, binding, maxAttempts: 1 })).toMatchObject({ outcome: 'unknown' });

    const reconciler = createReconciler({
      client: t.client({ role: 'settle_reconciler' }),
      holder: 'reconciler-no-record',
      batchSize: 100,
      retryAfterMs: 3_600_000,
      // The downstream's lookup by key finds nothing: the example's verdict for that answer.
      check: async (op) => (op.key === key ? verdict(undefined) : undefined),
    });
    const summary = await reconciler.sweep();
    expect(summary.operations.find((o) => o.key === key)?.result).toBe('resolved_failed');
    expect(await stateOf(key)).toMatchObject({
      status: 'failed',
      error: { code: 'not_attempted' },
      dead_letter_reason: null,
    });

    // The key's outcome is that failure: a retry is answered with it and runs nothing ...
    expect(await t.app.claim({ tenant, key, request, binding, maxAttempts: 1 })).toMatchObject({
      outcome: 'failed',
      error: { code: 'not_attempted' },
    });
    // ... and the payment is tried again under a new key.
    const again = await t.app.claim({ tenant, key: `${key}-2`, request, binding, maxAttempts: 1 });
    expect(again.outcome).toBe('acquired');
    if (again.outcome === 'acquired') await t.app.complete(again.attempt, { charge: 'ch_2' });
  });

  it("examples/reconcile.ts's verdict for each answer of the downstream", () => {
    expect(verdict({ id: 'ch_1', status: 'captured' })).toMatchObject({
      outcome: 'completed',
      result: { chargeId: 'ch_1' },
    });
    expect(verdict({ id: 'ch_1', status: 'declined' })).toMatchObject({
      outcome: 'failed',
      error: { code: 'declined' },
    });
    expect(verdict({ id: 'ch_1', status: 'processing' })).toEqual({ outcome: 'undecided' });
    expect(verdict(undefined)).toMatchObject({ outcome: 'failed', error: { code: 'not_attempted' } });
  });
});

describe('createReconciler: the precondition and HTTP keys', () => {
  it("a client retry while the check runs: the verdict is refused (SE053), nothing is judged, the retry's success settles", async () => {
    const key = await needsReconciliation('retried');
    let second: Awaited<ReturnType<typeof t.app.claim>> | undefined;
    const errors: unknown[] = [];
    const reconciler = createReconciler({
      client: t.client({ role: 'settle_reconciler' }),
      holder: 'reconciler-epoch',
      batchSize: 100,
      retryAfterMs: 3_600_000,
      check: async (op) => {
        if (op.key !== key) return undefined;
        expect(op.attempt).toBe(1);
        // Meanwhile an operator redrives it and the client retries: attempt 2 charges and loses
        // the response. The lookup below saw no charge (it looked before attempt 2 ran).
        await t.admin.redrive({ tenant, key, reason: 'retry it' });
        second = await t.app.claim({ tenant, key, request: { amount: '5.00', charge: key }, binding, maxAttempts: 1 });
        if (second.outcome !== 'acquired') throw new Error(`claim answered ${second.outcome}`);
        await t.app.reportUnknown(second.attempt);
        return { outcome: 'failed', error: { code: 'no_charge' }, reason: 'PSP has no charge (yet)' };
      },
      onError: (error) => errors.push(error),
    });
    const summary = await reconciler.sweep();
    expect(summary.operations.find((o) => o.key === key)?.result).toBe('refused');
    expect(errors.some((e) => e instanceof ResolveEvidenceStaleError)).toBe(true);
    expect(await stateOf(key)).toMatchObject({ status: 'unknown' });
    if (second?.outcome !== 'acquired') throw new Error('no second attempt');
    expect(await t.app.complete(second.attempt, { charge: 'ch_2' })).toMatchObject({ outcome: 'settled' });
    expect(await stateOf(key)).toMatchObject({ status: 'completed', result: { charge: 'ch_2' } });
  });

  it('a key of the HTTP middleware: a plain result is refused, saying why; an http decision stores the response format', async () => {
    // The middleware's request description (src/http/core/fingerprint.ts).
    const httpKey = async (label: string, url: string): Promise<string> => {
      const key = uniqueKey(label);
      const claim = await t.app.claim({
        tenant,
        key,
        request: { v: 2, method: 'POST', url, body: 'none', headers: {} },
        binding,
        maxAttempts: 1,
      });
      if (claim.outcome !== 'acquired') throw new Error(`claim answered ${claim.outcome}`);
      await t.app.reportUnknown(claim.attempt);
      return key;
    };
    const plain = await httpKey('http-plain', '/payouts/1');
    const aware = await httpKey('http-aware', '/payouts/2');
    const errors: unknown[] = [];
    const reconciler = createReconciler({
      client: t.client({ role: 'settle_reconciler' }),
      holder: 'reconciler-http',
      batchSize: 100,
      retryAfterMs: 3_600_000,
      check: async (op) => {
        if (op.key === plain) return { outcome: 'completed', result: { payout: 'po_1' } };
        if (op.key === aware)
          return {
            outcome: 'completed',
            http: {
              status: 201,
              body: { payout: 'po_2' },
              headers: { 'content-type': 'application/json', location: '/payouts/po_2' },
            },
          };
        return undefined;
      },
      onError: (error) => errors.push(error),
    });
    const summary = await reconciler.sweep();
    const results = Object.fromEntries(
      summary.operations.filter((o) => [plain, aware].includes(o.key)).map((o) => [o.key, o.result]),
    );
    expect(results).toEqual({ [plain]: 'refused', [aware]: 'resolved_completed' });
    const refusal = errors.find((e) => e instanceof SettleInputError) as Error | undefined;
    expect(refusal?.message).toMatch(/HTTP Idempotency-Key middleware.*idempotency-misconfigured/);
    expect(await stateOf(plain)).toMatchObject({ status: 'unknown' });
    expect(await stateOf(aware)).toMatchObject({
      status: 'completed',
      result: {
        v: 1,
        stored: true,
        status: 201,
        headers: [
          ['content-type', 'application/json'],
          ['location', '/payouts/po_2'],
        ],
        body: Buffer.from('{"payout":"po_2"}').toString('base64'),
      },
    });
  });
});
