import { sql } from 'slonik';
import { describe, expect, it, vi } from 'vitest';
import {
  type Classification,
  LeaseLostError,
  type RunInput,
  type RunOutcome,
  SettleTimeoutError,
} from '../../src/index.js';
import { expireLease } from '../../src/testing/clock.js';
import { binding, gate, holdRun, useClientTest, someoneWaitsOnLock, uniqueKey, waitFor } from './helpers.js';

const t = useClientTest('client_run');

const tenant = 'acme';
const runInput = (key: string, extra: Partial<RunInput> = {}): RunInput => ({
  tenant,
  key,
  request: { amount: '5.00' },
  binding,
  ...extra,
});

describe('run()', () => {
  it('completes once, then replays without running the effect again', async () => {
    const key = uniqueKey();
    let calls = 0;
    const effect = async () => {
      calls += 1;
      return { receipt: `r-${calls}` };
    };
    expect(await t.app.run(runInput(key), effect)).toEqual({
      outcome: 'completed',
      result: { receipt: 'r-1' },
      attempt: 1,
      settledBy: 'this_attempt',
    });
    expect(await t.app.run(runInput(key), effect)).toEqual({
      outcome: 'replay',
      result: { receipt: 'r-1' },
      settledAttempt: 1,
    });
    expect(calls).toBe(1);
  });

  it('conflict: a different request under the same key never runs the effect', async () => {
    const key = uniqueKey();
    await t.app.run(runInput(key), async () => 'ok');
    let calls = 0;
    const outcome = await t.app.run(runInput(key, { request: { amount: '6.00' } }), async () => {
      calls += 1;
      return 'never';
    });
    expect(outcome).toEqual({ outcome: 'conflict', conflictOn: ['request'] });
    expect(calls).toBe(0);
  });

  it('classifier: final errors fail the operation; retryable ones let a later run try again', async () => {
    class Declined extends Error {}
    const classify = (error: unknown): Classification => (error instanceof Declined ? 'final' : 'retryable');

    const finalKey = uniqueKey();
    const declined = await t.app.run(runInput(finalKey, { classify }), async () => {
      throw new Declined('card declined');
    });
    expect(declined).toMatchObject({
      outcome: 'failed',
      final: true,
      deadLettered: false,
      error: { name: 'Declined', message: 'card declined' },
    });
    let calls = 0;
    const again = await t.app.run(runInput(finalKey, { classify }), async () => {
      calls += 1;
      return 'never';
    });
    expect(again).toMatchObject({ outcome: 'failed', final: true });
    expect(calls).toBe(0);

    const flakyKey = uniqueKey();
    const flaky = await t.app.run(runInput(flakyKey, { classify }), async () => {
      throw new Error('503');
    });
    expect(flaky).toMatchObject({ outcome: 'failed', final: false, attempt: 1 });
    expect(await t.app.run(runInput(flakyKey, { classify }), async () => 'second time lucky')).toEqual({
      outcome: 'completed',
      result: 'second time lucky',
      attempt: 2,
      settledBy: 'this_attempt',
    });
  });

  it('dead-letters when the last allowed attempt fails', async () => {
    const outcome = await t.app.run(runInput(uniqueKey(), { maxAttempts: 1 }), async () => {
      throw new Error('boom');
    });
    expect(outcome).toMatchObject({ outcome: 'failed', final: true, deadLettered: true });
  });

  it('waits for an in-flight attempt of another worker and replays its result', async () => {
    const key = uniqueKey();
    const { run: first, release } = await holdRun(t.app, runInput(key), 'from the first worker');

    // An in_progress answer writes nothing (docs/protocol.md): watch the claims run() makes.
    const claims = vi.spyOn(t.app, 'claim');
    let secondCalls = 0;
    const second = t.app.run(runInput(key, { waitForMs: 30_000 }), async () => {
      secondCalls += 1;
      return 'never';
    });
    // The second worker has seen the live lease at least once before the first one finishes.
    try {
      await waitFor(async () =>
        claims.mock.settledResults.some((r) => r.type === 'fulfilled' && r.value.outcome === 'in_progress'),
      );
    } finally {
      claims.mockRestore();
    }
    release();

    expect(await first).toMatchObject({ outcome: 'completed', settledBy: 'this_attempt' });
    expect(await second).toEqual({ outcome: 'replay', result: 'from the first worker', settledAttempt: 1 });
    expect(secondCalls).toBe(0);
  });

  it('reports in_progress when the wait budget is spent', async () => {
    const key = uniqueKey();
    const { run: first, release } = await holdRun(t.app, runInput(key), 'done');
    const second = await t.app.run(runInput(key, { waitForMs: 0 }), async () => 'never');
    expect(second).toMatchObject({ outcome: 'in_progress', attempt: 1 });
    release();
    await first;
  });

  it('renews the lease on a timer while the effect runs', async () => {
    const key = uniqueKey();
    const outcome = await t.app.run(runInput(key, { leaseMs: 1_000 }), async ({ attempt }) => {
      const initial = attempt.leaseExpiresAt.getTime();
      await waitFor(async () => ((await t.admin.inspect(attempt))?.leaseExpiresAt?.getTime() ?? 0) > initial);
      return 'renewed';
    });
    expect(outcome).toMatchObject({ outcome: 'completed', result: 'renewed' });
  });

  it('aborts the signal when the lease is taken over, and the fenced failure is not recorded', async () => {
    const key = uniqueKey();
    const started = gate();
    const takenOver = gate();
    let reason: unknown;
    const outcome = await Promise.all([
      t.app.run(runInput(key, { heartbeatIntervalMs: 3_600_000 }), async ({ signal, heartbeat }) => {
        started.open();
        await takenOver.promise;
        expect(signal.aborted).toBe(false);
        expect(await heartbeat()).toEqual({ outcome: 'fenced', reason: 'superseded', status: 'running' });
        expect(signal.aborted).toBe(true);
        reason = signal.reason;
        throw signal.reason;
      }),
      (async () => {
        await started.promise;
        await expireLease(t.su, tenant, key);
        const other = await t.client().claim(runInput(key));
        expect(other).toMatchObject({ outcome: 'acquired', attempt: { attempt: 2 } });
        takenOver.open();
      })(),
    ]).then(([first]) => first);
    expect(reason).toBeInstanceOf(LeaseLostError);
    expect(reason).toMatchObject({ reason: 'superseded' });
    expect(outcome).toMatchObject({ outcome: 'fenced', reason: 'superseded', attempt: 1 });
    expect((await t.admin.inspect({ tenant, key }))?.status).toBe('running');
  });

  it('a late success after another attempt settled returns the canonical result, not ours', async () => {
    const key = uniqueKey();
    const { run: slow, release } = await holdRun(
      t.app,
      runInput(key, { heartbeatIntervalMs: 3_600_000 }),
      'slow result',
    );
    await expireLease(t.su, tenant, key);
    expect(await t.app.run(runInput(key), async () => 'fast result')).toMatchObject({
      outcome: 'completed',
      attempt: 2,
      settledBy: 'this_attempt',
    });
    release();
    expect(await slow).toEqual({ outcome: 'completed', result: 'fast result', attempt: 1, settledBy: 'other_attempt' });
  });

  it('reports unknown, never failure, when the settle call hits statement_timeout', async () => {
    const key = uniqueKey();
    const pool = await t.app.getPool();
    let outcome: RunOutcome | undefined;
    try {
      outcome = await pool.connect(async (connection) => {
        await connection.query(sql.unsafe`set statement_timeout = 500`);
        return t.app.run(
          runInput(key),
          async () => {
            // An admin transaction holds the operation row: complete() will wait for it.
            await t.su.query('begin');
            await t.su.query('select 1 from settle_private.operations where tenant = $1 and key = $2 for update', [
              tenant,
              key,
            ]);
            return 'effect done';
          },
          { connection },
        );
      });
    } finally {
      await t.su.query('rollback');
    }
    expect(outcome).toMatchObject({ outcome: 'unknown', attempt: 1, record: { outcome: 'found', status: 'running' } });
    if (outcome?.outcome !== 'unknown') throw new Error('unreachable');
    expect(outcome.cause).toBeInstanceOf(SettleTimeoutError);
    expect(await someoneWaitsOnLock(t.su)).toBe(false);
  });
});
