/**
 * Wraps a feed handler (`client.consume(name, byKeyPrefix('http:', handler))`) so that it sees
 * only the events of keys that start with `prefix`: the settlements of the HTTP middleware routes
 * configured with that `keyPrefix`, apart from the application's own run() keys. The other
 * events of the batch are acknowledged with it, unhandled; a batch with none of them does not
 * call the handler.
 */
export function byKeyPrefix<E extends { readonly key: string }, C, R>(
  prefix: string,
  handler: (events: readonly E[], context: C) => Promise<R>,
): (events: readonly E[], context: C) => Promise<R | undefined> {
  if (typeof prefix !== 'string' || prefix === '') throw new RangeError('prefix must be a non-empty string');
  return async (events, context) => {
    const mine = events.filter((e) => e.key.startsWith(prefix));
    return mine.length === 0 ? undefined : handler(mine, context);
  };
}
