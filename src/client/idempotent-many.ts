// settle.idempotentMany(fn, options): idempotent() for arrays. Wrap `fn(items)` once; every call
// runs its items through runMany() under the keys derived from them, gives `fn` only the items
// that must run, and answers one settled result per item: fulfilled with the result (a replay
// included), or rejected with the IdempotentCallError subclass of the item's outcome.
import { unsettledError } from './idempotent.js';
import type { IdempotentManyOptions, ItemReport, RunManyContext, SettleClient } from './types.js';

export function makeIdempotentMany<A, R>(
  client: SettleClient,
  fn: (items: readonly A[], context: RunManyContext) => Promise<readonly ItemReport<R>[]>,
  options: IdempotentManyOptions<A, R>,
): (items: readonly A[]) => Promise<PromiseSettledResult<R>[]> {
  const { key, request, result, rerunAfterUnknown, ...settings } = options;
  return async (items) => {
    const keyed = items.map((item) => ({ key: key(item), request: request(item) }));
    const outcomes = await client.runMany<R>(
      { ...settings, items: keyed },
      (context) =>
        fn(
          context.items.map((acquired) => items[acquired.index] as A),
          context,
        ),
      {
        ...(result === undefined ? {} : { result }),
        ...(rerunAfterUnknown === undefined ? {} : { rerunAfterUnknown }),
      },
    );
    return outcomes.map((outcome, i): PromiseSettledResult<R> => {
      if (outcome.outcome === 'completed' || outcome.outcome === 'replay')
        return { status: 'fulfilled', value: outcome.result as R };
      return {
        status: 'rejected',
        reason: unsettledError(outcome, { tenant: settings.tenant, key: (keyed[i] as { key: string }).key }),
      };
    });
  };
}
