import type { SettleClient } from '../../client/client.js';

/** Keys remembered per process, most recent last; the oldest is forgotten past this. */
export const IN_DOUBT_LIMIT = 10_000;

/**
 * The keys this process saw become `unknown` (a 504, a handler timeout, a response that could
 * not be stored) or answered `outcome-unknown`. The engine's claim opens a new attempt on an
 * `unknown` operation whenever its budget allows, and an attempt that cannot run the handler
 * must not use one up: a key in this set is answered from the lock-gated read (settle.get),
 * which opens nothing. A key this process never saw costs one attempt on its first retry here;
 * docs/http.md ("In-doubt requests") says so.
 */
export class InDoubtKeys {
  private readonly keys = new Set<string>();
  constructor(private readonly limit = IN_DOUBT_LIMIT) {}

  has(tenant: string, key: string): boolean {
    return this.keys.size > 0 && this.keys.has(InDoubtKeys.id(tenant, key));
  }
  add(tenant: string, key: string): void {
    const id = InDoubtKeys.id(tenant, key);
    this.keys.delete(id);
    this.keys.add(id);
    if (this.keys.size > this.limit) this.keys.delete(this.keys.values().next().value as string);
  }
  delete(tenant: string, key: string): void {
    this.keys.delete(InDoubtKeys.id(tenant, key));
  }
  private static id(tenant: string, key: string): string {
    return `${tenant}\u0000${key}`;
  }
}

const byClient = new WeakMap<SettleClient, InDoubtKeys>();

/** The in-doubt keys of one client (every middleware built on it shares them). */
export function inDoubt(settle: SettleClient): InDoubtKeys {
  let keys = byClient.get(settle);
  if (keys === undefined) byClient.set(settle, (keys = new InDoubtKeys()));
  return keys;
}
