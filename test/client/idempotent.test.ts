// settle.idempotent(fn, options): the wrapped function is called as before and answers as run()
// does, against a real PostgreSQL as a settle_app login: a completed call is replayed without
// calling fn, concurrent calls under one key run fn once, a changed request is a typed conflict,
// a throwing fn is a retryable failure (the next call runs it again), an unknown outcome is never
// rerun blindly, and a zod `result` schema types and validates the replayed value.
import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  IdempotencyConflictError,
  idempotencyContext,
  IdempotentCallError,
  OperationFailedError,
  OperationInProgressError,
  OutcomeUnknownError,
  StoredResultMismatchError,
} from '../../src/index.js';
import { binding, gate, uniqueKey, useClientTest, waitFor } from './helpers.js';

const t = useClientTest('client_idempotent');

interface Transfer {
  readonly id: string;
  readonly amountCents: number;
  readonly to: string;
}
const receipt = z.object({ transferId: z.string(), amountCents: z.number() });

/** A counting "downstream": how often the wrapped function really ran, per key. */
function downstream() {
  const calls = new Map<string, number>();
  const send = async (
    transfer: Transfer,
    memo?: string,
  ): Promise<{ transferId: string; amountCents: number; memo?: string }> => {
    const n = (calls.get(transfer.id) ?? 0) + 1;
    calls.set(transfer.id, n);
    return {
      transferId: `tr_${transfer.id}_${n}`,
      amountCents: transfer.amountCents,
      ...(memo === undefined ? {} : { memo }),
    };
  };
  return { send, calls: (id: string) => calls.get(id) ?? 0 };
}

const options = {
  tenant: 'acme',
  key: (transfer: Transfer) => transfer.id,
  request: (transfer: Transfer) => ({ amountCents: transfer.amountCents, to: transfer.to }),
  binding,
} as const;

/** Backends of this database waiting on a lock (a barrier: "every caller is now blocked"). */
async function lockWaiters(): Promise<number> {
  await t.su.query('select pg_stat_clear_snapshot()');
  const { rows } = await t.su.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()`,
  );
  return rows[0]?.n ?? 0;
}

describe('settle.idempotent()', () => {
  it('keeps the function type; a second call replays the stored result without calling fn', async () => {
    const { send, calls } = downstream();
    const sendOnce = t.app.idempotent(send, options);
    expectTypeOf(sendOnce).parameters.toEqualTypeOf<[transfer: Transfer, memo?: string]>();
    expectTypeOf(sendOnce).returns.resolves.toEqualTypeOf<{ transferId: string; amountCents: number; memo?: string }>();

    const transfer = { id: uniqueKey('tr'), amountCents: 1250, to: 'acct_9' };
    const first = await sendOnce(transfer, 'rent');
    const second = await sendOnce(transfer, 'ignored: not part of the request');
    expect(first).toEqual({ transferId: `tr_${transfer.id}_1`, amountCents: 1250, memo: 'rent' });
    expect(second).toEqual(first);
    expect(calls(transfer.id)).toBe(1);
    const attempts = await t.admin.attempts({ tenant: 'acme', key: transfer.id });
    expect(attempts).toHaveLength(1);
  });

  it('with a zod result schema the replayed result is typed and validated', async () => {
    const { send, calls } = downstream();
    const sendOnce = t.app.idempotent(async (transfer: Transfer) => send(transfer), { ...options, result: receipt });
    expectTypeOf(sendOnce).returns.resolves.toEqualTypeOf<{ transferId: string; amountCents: number }>();
    const transfer = { id: uniqueKey('tr'), amountCents: 700, to: 'acct_1' };
    expect(await sendOnce(transfer)).toEqual({ transferId: `tr_${transfer.id}_1`, amountCents: 700 });
    expect(await sendOnce(transfer)).toEqual({ transferId: `tr_${transfer.id}_1`, amountCents: 700 });
    expect(calls(transfer.id)).toBe(1);

    // The same key read through a schema the stored result no longer matches: a typed error, never a wrongly typed value.
    const stricter = t.app.idempotent(
      async (tr: Transfer) => ({ transferId: tr.id, amountCents: 1, currency: 'EUR' as const }),
      {
        ...options,
        result: receipt.extend({ currency: z.literal('EUR') }),
      },
    );
    await expect(stricter(transfer)).rejects.toBeInstanceOf(StoredResultMismatchError);
    expect(calls(transfer.id)).toBe(1);
  });

  it('concurrent calls under one key race on the first claim, and fn runs once; all get its result', {
    timeout: 120_000,
  }, async () => {
    const { send, calls } = downstream();
    const sendOnce = t.app.idempotent(send, { ...options, waitForMs: 90_000 });
    const ours = t.client({ poolSize: 8 });
    const sendOnceWide = ours.idempotent(send, { ...options, waitForMs: 90_000 });
    const transfer = { id: uniqueKey('tr'), amountCents: 300, to: 'acct_2' };
    const callers = 6;
    // A superuser transaction holds the operations table: every caller's first claim blocks
    // behind it, then all are released at once.
    await t.su.query('begin');
    await t.su.query('lock table settle_private.operations in exclusive mode');
    let pending: Promise<unknown>[] = [];
    try {
      pending = Array.from({ length: callers }, (_, i) => (i % 2 === 0 ? sendOnce : sendOnceWide)(transfer));
      await waitFor(async () => (await lockWaiters()) >= callers, 60_000);
    } finally {
      await t.su.query('commit');
    }
    const results = await Promise.all(pending);
    expect(calls(transfer.id)).toBe(1);
    expect(new Set(results.map((r) => JSON.stringify(r)))).toEqual(
      new Set([JSON.stringify({ transferId: `tr_${transfer.id}_1`, amountCents: 300 })]),
    );
    expect(await t.admin.attempts({ tenant: 'acme', key: transfer.id })).toHaveLength(1);
  });

  it('a call while another holds the key answers OperationInProgressError (waitForMs: 0), and nothing runs', async () => {
    const held = gate();
    const started = gate();
    let runs = 0;
    const slow = t.app.idempotent(
      async (transfer: Transfer) => {
        runs += 1;
        started.open();
        await held.promise;
        return { transferId: transfer.id };
      },
      { ...options, waitForMs: 0 },
    );
    const transfer = { id: uniqueKey('tr'), amountCents: 100, to: 'acct_3' };
    const first = slow(transfer);
    await started.promise;
    const error = await slow(transfer).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OperationInProgressError);
    expect(error).toBeInstanceOf(IdempotentCallError);
    expect((error as OperationInProgressError).outcome).toMatchObject({ outcome: 'in_progress', attempt: 1 });
    expect((error as OperationInProgressError).retryAfterMs).toBeGreaterThan(0);
    expect((error as OperationInProgressError).key).toBe(transfer.id);
    held.open();
    expect(await first).toEqual({ transferId: transfer.id });
    expect(runs).toBe(1);
  });

  it('a different request under the same key is an IdempotencyConflictError, and fn is not called', async () => {
    const { send, calls } = downstream();
    const sendOnce = t.app.idempotent(send, options);
    const transfer = { id: uniqueKey('tr'), amountCents: 500, to: 'acct_4' };
    await sendOnce(transfer);
    const error = await sendOnce({ ...transfer, amountCents: 501 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(IdempotencyConflictError);
    expect((error as IdempotencyConflictError).conflictOn).toEqual(['request']);
    expect((error as IdempotencyConflictError).code).toBe('IDEMPOTENCY_CONFLICT');
    expect(calls(transfer.id)).toBe(1);

    // The binding may be derived per call: another principal under the key conflicts on the binding.
    const asCaller = t.app.idempotent(async (transfer: Transfer, _caller: string) => send(transfer), {
      ...options,
      key: (tr) => tr.id,
      request: (tr) => ({ amountCents: tr.amountCents, to: tr.to }),
      binding: (_tr, caller) => ({ principal: caller, scopes: binding.scopes, generation: binding.generation }),
    });
    const stranger = await asCaller(transfer, 'mallory').catch((e: unknown) => e);
    expect(stranger).toBeInstanceOf(IdempotencyConflictError);
    expect((stranger as IdempotencyConflictError).conflictOn).toEqual(['binding']);
    expect(await asCaller(transfer, binding.principal)).toEqual({
      transferId: `tr_${transfer.id}_1`,
      amountCents: 500,
    });
    expect(calls(transfer.id)).toBe(1);
  });

  it('a throwing fn is a retryable failure (cause: the error); the next call runs it again; the budget spent dead-letters', async () => {
    let runs = 0;
    const flaky = t.app.idempotent(async (transfer: Transfer) => {
      runs += 1;
      if (runs === 1) throw new Error('provider 503');
      return { transferId: `${transfer.id}-${runs}` };
    }, options);
    const transfer = { id: uniqueKey('tr'), amountCents: 900, to: 'acct_5' };
    const error = await flaky(transfer).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OperationFailedError);
    const failed = error as OperationFailedError;
    expect(failed.final).toBe(false);
    expect(failed.deadLettered).toBe(false);
    expect(failed.cause).toBeInstanceOf(Error);
    expect((failed.cause as Error).message).toBe('provider 503');
    expect(failed.outcome).toMatchObject({ outcome: 'failed', attempt: 1, error: { message: 'provider 503' } });
    expect(await flaky(transfer)).toEqual({ transferId: `${transfer.id}-2` });
    expect(await flaky(transfer)).toEqual({ transferId: `${transfer.id}-2` });
    expect(runs).toBe(2);

    let tries = 0;
    const broken = t.app.idempotent(
      async (_transfer: Transfer) => {
        tries += 1;
        throw new Error('always');
      },
      { ...options, maxAttempts: 2 },
    );
    const other = { id: uniqueKey('tr'), amountCents: 1, to: 'acct_6' };
    await expect(broken(other)).rejects.toMatchObject({ final: false, deadLettered: false });
    await expect(broken(other)).rejects.toMatchObject({ final: true, deadLettered: true });
    const after = await broken(other).catch((e: unknown) => e);
    expect(after).toBeInstanceOf(OperationFailedError);
    expect(after).toMatchObject({ final: true, deadLettered: true });
    expect(tries).toBe(2);
  });

  it('an unknown outcome is OutcomeUnknownError; the next call reconciles with the arguments instead of rerunning fn', async () => {
    let runs = 0;
    const timeout = Object.assign(new Error('provider timed out'), { name: 'TimeoutError' });
    const reconciled: string[] = [];
    const wrapped = (reconcile: boolean) =>
      t.app.idempotent(
        async (transfer: Transfer) => {
          runs += 1;
          if (runs === 1) throw timeout;
          return { transferId: `${transfer.id}-${runs}` };
        },
        {
          ...options,
          ...(reconcile
            ? {
                reconcile: async (context, transfer) => {
                  reconciled.push(`${transfer.id} after ${context.earlier.count}`);
                  return { transferId: `${transfer.id}-found` };
                },
              }
            : {}),
        },
      );
    const transfer = { id: uniqueKey('tr'), amountCents: 42, to: 'acct_7' };
    const first = await wrapped(false)(transfer).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(OutcomeUnknownError);
    expect((first as OutcomeUnknownError).reason).toBe('effect_outcome_unknown');
    expect((first as OutcomeUnknownError).cause).toBe(timeout);
    const blind = await wrapped(false)(transfer).catch((e: unknown) => e);
    expect(blind).toBeInstanceOf(OutcomeUnknownError);
    expect((blind as OutcomeUnknownError).reason).toBe('needs_reconciliation');
    expect(runs).toBe(1);
    expect(await wrapped(true)(transfer)).toEqual({ transferId: `${transfer.id}-found` });
    expect(reconciled).toEqual([`${transfer.id} after 1`]); // the blind call opened no attempt
    expect(runs).toBe(1);
  });

  it('idempotencyContext() is the attempt inside fn, undefined outside', async () => {
    expect(idempotencyContext()).toBeUndefined();
    const seen = t.app.idempotent(async (transfer: Transfer) => {
      const context = idempotencyContext();
      return {
        key: context?.attempt.key ?? null,
        attempt: context?.attemptNumber ?? null,
        aborted: context?.signal.aborted ?? null,
        id: transfer.id,
      };
    }, options);
    const transfer = { id: uniqueKey('tr'), amountCents: 5, to: 'acct_8' };
    expect(await seen(transfer)).toEqual({ key: transfer.id, attempt: 1, aborted: false, id: transfer.id });
    expect(idempotencyContext()).toBeUndefined();
  });

  it('bad derived input is the typed input error before any round trip, and fn is not called', async () => {
    let runs = 0;
    const wrapped = t.app.idempotent(
      async (_transfer: Transfer) => {
        runs += 1;
        return 1;
      },
      { ...options, key: () => '' },
    );
    await expect(wrapped({ id: 'x', amountCents: 1, to: 'y' })).rejects.toMatchObject({
      name: 'InvalidKeyError',
      sqlstate: null,
    });
    expect(runs).toBe(0);
  });
});
