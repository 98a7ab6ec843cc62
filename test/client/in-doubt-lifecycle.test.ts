import { describe, expect, it } from 'vitest';
import { createReconciler, type FeedEvent, type ReconcileDecision } from '../../src/index.js';
import { runCli } from '../support/cli.js';
import { asRole, binding, uniqueKey, useClientTest, waitFor } from './helpers.js';

// A caller that got an unknown outcome and never came back: its operation keeps budget, so no
// attempt dead-letters it. The dead_letter_in_doubt upkeep job (run here by the real
// `pg-settle maintain`) hands it to the reconciler once nobody touched it for in_doubt_after;
// the reconciler resolves it from the downstream, and the feed delivers the outcome once.
const t = useClientTest('client_in_doubt_lifecycle');
const tenant = 'acme';

class ProviderTimeout extends Error {
  override name = 'TimeoutError';
}

describe('an in-doubt operation whose caller gave up', () => {
  it('is dead-lettered by upkeep, resolved by the reconciler and delivered by the feed exactly once', async () => {
    const consumer = uniqueKey('ledger');
    await t.su.query(`select settle.register_consumer(name => $1)`, [consumer]);
    const key = uniqueKey('payout');
    // The downstream: the charge happens, then the provider's answer is lost.
    const charges = new Map<string, { id: string; amount: string }>();
    const outcome = await t.app.run(
      { tenant, key, request: { amount: '12.00' }, binding, maxAttempts: 5 },
      async () => {
        charges.set(key, { id: `ch_${charges.size + 1}`, amount: '12.00' });
        throw new ProviderTimeout('provider did not answer');
      },
    );
    expect(outcome).toMatchObject({ outcome: 'unknown' });
    // The caller gives up here. Nothing lists the operation yet: it is in doubt, not a dead letter.
    const reconcilerClient = t.client({ role: 'settle_reconciler' });
    const checked: string[] = [];
    const reconciler = createReconciler({
      client: reconcilerClient,
      holder: 'test-reconciler',
      check: async (operation): Promise<ReconcileDecision> => {
        checked.push(operation.key);
        const charge = charges.get(operation.key);
        return charge === undefined
          ? { outcome: 'failed', error: { code: 'no_charge' }, evidence: { looked_up: operation.key } }
          : { outcome: 'completed', result: charge, evidence: { charge: charge.id } };
      },
    });
    expect((await reconciler.sweep()).operations.filter((o) => o.key === key)).toEqual([]);
    expect((await t.admin.deadLetters()).filter((d) => d.key === key)).toEqual([]);
    expect(await t.admin.metrics()).toMatchObject({ inDoubt: { under5m: 1n } });

    // Nobody touches it for longer than in_doubt_after (15 minutes by default): its last change
    // is moved back rather than waited for.
    await t.su.query(
      `update settle_private.operations set updated_at = now() - interval '16 minutes' where tenant = $1 and key = $2`,
      [tenant, key],
    );
    expect(await t.admin.metrics()).toMatchObject({ inDoubt: { under5m: 0n, from5mTo1h: 1n, over1h: 0n } });
    const admin = asRole(t.db.url, 'settle_admin');
    const maintain = await runCli(['maintain', '--once', '--force', '--json'], { databaseUrl: admin });
    expect(maintain.code, maintain.stderr).toBe(0);
    expect(maintain.stdout).toContain('dead_letter_in_doubt');
    const listed = await runCli(['dead-letters', '--json'], { databaseUrl: admin });
    expect(listed.code, listed.stderr).toBe(0);
    expect(
      (listed.json.deadLetters as { key: string; reason: string; status: string }[]).filter((d) => d.key === key),
    ).toEqual([expect.objectContaining({ key, reason: 'needs_reconciliation', status: 'unknown' })]);
    const { rows: audit } = await t.su.query<{ event: string; outcome: string; detail: { cause: string } }>(
      `select event, outcome, detail from settle.audit_log where tenant = $1 and key = $2 and event = 'expire'`,
      [tenant, key],
    );
    expect(audit).toEqual([
      expect.objectContaining({
        event: 'expire',
        outcome: 'dead_lettered',
        detail: expect.objectContaining({ cause: 'in_doubt_abandoned' }),
      }),
    ]);
    // A caller that comes back now is told to wait for reconciliation; nothing runs again.
    const late = await t.app.run({ tenant, key, request: { amount: '12.00' }, binding, maxAttempts: 5 }, async () => {
      throw new Error('must not run');
    });
    expect(late).toMatchObject({ outcome: 'unknown' });

    const swept = await reconciler.sweep();
    expect(swept.operations.filter((o) => o.key === key)).toEqual([{ tenant, key, result: 'resolved_completed' }]);
    expect(charges.size).toBe(1);
    expect(checked.filter((k) => k === key)).toHaveLength(1);

    // The feed: the resolution is one event. A sentinel settled after everything else marks the
    // point up to which the consumer has read, so "once" is checked without waiting on time.
    await reconciler.sweep();
    await t.su.query('select * from settle.run_upkeep(force => true)');
    const sentinel = uniqueKey('sentinel');
    await t.app.run({ tenant, key: sentinel, request: { amount: '0.01' }, binding }, async () => ({ ok: true }));
    const delivered: FeedEvent[] = [];
    const controller = new AbortController();
    const errors: Error[] = [];
    const done = t.client({ role: 'settle_consumer' }).consume(
      consumer,
      async (events) => {
        delivered.push(...events.filter((e) => e.key === key || e.key === sentinel));
      },
      { signal: controller.signal, onError: (error) => errors.push(error), idleMs: 20, maxIdleMs: 200 },
    );
    await waitFor(async () => delivered.some((e) => e.key === sentinel), 60_000);
    controller.abort();
    await done;
    expect(errors).toEqual([]);
    expect(delivered.filter((e) => e.key === key)).toEqual([
      expect.objectContaining({
        key,
        status: 'completed',
        statusBefore: 'unknown',
        result: { id: 'ch_1', amount: '12.00' },
      }),
    ]);
  });

  it('leaves alone an operation a caller holds, one touched recently, and a pending one whose attempts all failed', async () => {
    const held = uniqueKey('held');
    const claim = await t.app.claim({ tenant, key: held, request: { n: 1 }, binding, leaseMs: 600_000 });
    if (claim.outcome !== 'acquired') throw new Error('not acquired');
    await t.app.reportUnknown(claim.attempt);
    const again = await t.app.claim({
      tenant,
      key: held,
      request: { n: 1 },
      binding,
      leaseMs: 600_000,
      rerunAfterUnknown: true,
    });
    expect(again).toMatchObject({ outcome: 'acquired', status: 'unknown' });
    const recent = uniqueKey('recent');
    const r = await t.app.claim({ tenant, key: recent, request: { n: 1 }, binding });
    if (r.outcome !== 'acquired') throw new Error('not acquired');
    await t.app.reportUnknown(r.attempt);
    const failedOnce = uniqueKey('failed-once');
    const f = await t.app.claim({ tenant, key: failedOnce, request: { n: 1 }, binding });
    if (f.outcome !== 'acquired') throw new Error('not acquired');
    await t.app.fail(f.attempt, { code: 'declined' }, { retryable: true });
    await t.su.query(
      `update settle_private.operations set updated_at = now() - interval '1 day' where tenant = $1 and key = any($2)`,
      [tenant, [held, failedOnce]],
    );
    await t.su.query('select * from settle.run_upkeep(job => $1, force => true)', ['dead_letter_in_doubt']);
    const { rows } = await t.su.query<{ key: string; status: string; dead_letter_reason: string | null }>(
      `select key, status::text, dead_letter_reason from settle.operations where tenant = $1 and key = any($2) order by key`,
      [tenant, [held, recent, failedOnce]],
    );
    expect(rows.every((row) => row.dead_letter_reason === null)).toBe(true);
  });
});
