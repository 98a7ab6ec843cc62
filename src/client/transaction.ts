import { type DatabaseTransactionConnection, sql } from 'slonik';
import type { ClientCore } from './core.js';
import { isRetryable, mapDatabaseError } from './errors.js';
import { withRetry } from './retry.js';
import { claimLoop, defaultErrorToJson, fromObservation, isAmbiguous, unknownOutcome } from './run.js';
import type {
  AttemptHandle,
  Json,
  RunOptions,
  RunOutcome,
  SettleClient,
  TransactionEffectContext,
  TransactionOutcome,
  TransactionRunInput,
} from './types.js';

export type { Isolation, TransactionEffectContext, TransactionOutcome, TransactionRunInput } from './types.js';

const SET_ISOLATION = {
  'read committed': sql.unsafe`set transaction isolation level read committed`,
  'repeatable read': sql.unsafe`set transaction isolation level repeatable read`,
  serializable: sql.unsafe`set transaction isolation level serializable`,
} as const;

/** Thrown inside the savepoint to roll the effect back when complete() did not settle it. */
class NotSettled {
  constructor(readonly outcome: RunOutcome) {}
}

/**
 * Claim, effect and complete in ONE transaction. The effect runs in a savepoint together with
 * complete(): if the effect throws, the savepoint rolls back (the effect's writes vanish) and
 * fail() is recorded in the same transaction as the claim, so no attempt lingers with a lease and
 * a crash at any point leaves either nothing or a fully settled operation. Transient conflicts
 * (40001, 40P01, 55P03) re-run the whole transaction, effect included, with backoff.
 */
export async function runInTransaction(
  client: SettleClient,
  core: ClientCore,
  input: TransactionRunInput,
  effect: (context: TransactionEffectContext) => Promise<Json>,
  options?: RunOptions,
): Promise<TransactionOutcome> {
  const outer = options?.connection;
  const retryable = outer === undefined || !('transactionDepth' in outer);
  return claimLoop(input, () =>
    withRetry('runInTransaction', core.retry, retryable, async () => {
      const base = outer ?? (await core.getPool());
      let handle: AttemptHandle | undefined;
      let reachedCommit = false;
      try {
        return await base.transaction(async (tx) => {
          if (input.isolation !== undefined && outer === undefined) await tx.query(SET_ISOLATION[input.isolation]);
          const claimed = await client.claim(input, { connection: tx });
          if (claimed.outcome !== 'acquired') return claimed;
          const attempt = claimed.attempt;
          handle = attempt;
          const outcome = await settleInSavepoint(client, tx, attempt, input, effect);
          reachedCommit = true;
          return { outcome: 'acquired' as const, value: outcome };
        }, 0);
      } catch (error) {
        const mapped = mapDatabaseError(error);
        // Only COMMIT itself failed ambiguously: the settlement may or may not have committed.
        if (reachedCommit && handle !== undefined && outer === undefined && isAmbiguous(mapped)) {
          return { outcome: 'acquired' as const, value: await unknownOutcome(client, handle, mapped, {}) };
        }
        throw mapped;
      }
    }),
  );
}

async function settleInSavepoint(
  client: SettleClient,
  tx: DatabaseTransactionConnection,
  attempt: AttemptHandle,
  input: TransactionRunInput,
  effect: (context: TransactionEffectContext) => Promise<Json>,
): Promise<RunOutcome> {
  const call = { connection: tx };
  try {
    return await tx.transaction(async (savepoint) => {
      const result = await effect({ transaction: savepoint, attempt });
      const observation = await client.complete(attempt, result, { connection: savepoint });
      const outcome = await fromObservation(client, attempt, observation, { connection: savepoint });
      if (outcome.outcome !== 'completed' || outcome.settledBy !== 'this_attempt') throw new NotSettled(outcome);
      return outcome;
    }, 0);
  } catch (error) {
    if (error instanceof NotSettled) return error.outcome;
    const mapped = mapDatabaseError(error);
    // Transient conflicts and infrastructure failures abort the whole transaction.
    if (isRetryable(mapped) || isAmbiguous(mapped)) throw mapped;
    // The savepoint rolled the effect's writes back: whatever the classification says about an
    // outside call, the transaction's own effect did not happen, so only `final` ends the operation.
    const retryable = (input.classify ?? (() => 'retryable'))(error) !== 'final';
    const errorJson = (input.errorToJson ?? defaultErrorToJson)(error);
    const observation = await client.fail(attempt, errorJson, { ...call, retryable });
    return fromObservation(client, attempt, observation, call, { cause: error, error: errorJson });
  }
}
