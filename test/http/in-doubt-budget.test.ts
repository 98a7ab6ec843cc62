// An in-doubt key does not spend its HTTP attempt budget while it waits for reconciliation, also
// on a route with rerunAfterUnknown: true. Every adapter, real servers, a real PostgreSQL, the
// real upkeep function and the real reconciler: a handler that answers 504 (the provider timed
// out), the caller gives up, the upkeep dead-letters the key for the reconciler, and every retry
// meanwhile (before the reconciler leases it, and while its check runs) is answered 500
// outcome-unknown without running the handler or opening an attempt. Only attempts that ran
// spend the budget: each rerun after an unknown is one.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createReconciler, createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { ALL_FRAMEWORKS, startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest } from './support.js';

const PLAN = [{ status: 504 }, { status: 504 }, { status: 201 }];

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  let ctx: HttpTestContext;
  let app: TestApp;
  let reconcilerClient: SettleClient;
  beforeAll(async () => {
    ctx = await setupHttpTest(`http_budget_${framework}`);
    reconcilerClient = createSettleClient({ connectionString: asRole(ctx.db.url, 'settle_reconciler'), poolSize: 2 });
    app = await startApp(framework, { settle: ctx.settle });
  });
  afterAll(async () => {
    await app?.close();
    await reconcilerClient?.end();
    await ctx?.close();
  });

  test('rerunAfterUnknown: retries of a key waiting for reconciliation open no attempt; the reconciler settles it', async () => {
    const key = newKey();
    const retry = () => send(`${app.url}/status`, { key, json: PLAN });
    const operation = async () => (await ctx.admin.inspect({ tenant: 'acme', key }))!;

    expect((await retry()).status).toBe(504);
    expect(await operation()).toMatchObject({ status: 'unknown', attempt: 1, maxAttempts: 5 });
    // rerunAfterUnknown: the next request runs the handler again, which is an attempt that ran.
    const rerun = await retry();
    expect(rerun.status).toBe(504);
    expect(rerun.json()).toMatchObject({ n: 2, earlier: { reportedUnknown: true } });
    expect(await operation()).toMatchObject({ status: 'unknown', attempt: 2 });

    // The caller gives up; the upkeep job dead-letters the key for the reconciler.
    const upkeep = await ctx.su.query<{ n: number }>(
      `select settle.dead_letter_in_doubt(older_than => interval '0 seconds') as n`,
    );
    expect(upkeep.rows[0]!.n).toBeGreaterThanOrEqual(1);
    expect(await operation()).toMatchObject({
      status: 'unknown',
      attempt: 2,
      deadLetterReason: 'needs_reconciliation',
    });

    // More retries than the whole budget: each answered in doubt, none runs the handler or spends an attempt.
    for (let i = 0; i < 7; i += 1) {
      const answer = await retry();
      expect(answer.status).toBe(500);
      expect(answer.json()).toMatchObject({ type: 'urn:pg-settle:problem:outcome-unknown', deadLettered: true });
    }
    expect(app.hooks.calls.status).toBe(2);
    expect(await operation()).toMatchObject({ status: 'unknown', attempt: 2, maxAttempts: 5 });
    expect(await ctx.admin.attempts({ tenant: 'acme', key })).toHaveLength(2);

    // The reconciler leases it; retries while its check runs are answered the same way.
    const duringCheck: number[] = [];
    const reconciler = createReconciler({
      client: reconcilerClient,
      telemetry: false,
      check: async (op) => {
        if (op.key !== key) return { outcome: 'undecided' };
        for (let i = 0; i < 3; i += 1) duringCheck.push((await retry()).status);
        return {
          outcome: 'completed',
          http: { status: 201, body: { payout: 'po_1' }, headers: { location: '/payouts/po_1' } },
        };
      },
    });
    const swept = await reconciler.sweep();
    expect(swept.operations).toContainEqual({ tenant: 'acme', key, result: 'resolved_completed' });
    expect(duringCheck).toEqual([500, 500, 500]);

    const replay = await retry();
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('location')).toBe('/payouts/po_1');
    expect(replay.json()).toEqual({ payout: 'po_1' });
    expect(app.hooks.calls.status).toBe(2);
    // The resolution is recorded as the one settled attempt after the two that ran (settle.resolve).
    expect(await operation()).toMatchObject({ status: 'completed', attempt: 3, settledAttempt: 3 });
  });
});
