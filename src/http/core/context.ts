import { createHash } from 'node:crypto';
import type { DatabaseTransactionConnection } from 'slonik';

/** What the handler gets while it runs under a key (`req.idempotency` / `request.idempotency`). */
export interface IdempotencyContext {
  /** The Idempotency-Key as parsed. */
  readonly key: string;
  readonly tenant: string;
  /** The attempt this handler runs as (1 on the first request, higher after a takeover). */
  readonly attempt: number;
  /**
   * A key for your downstream calls (payment provider, email API), the same for every attempt of
   * this (tenant, key): pass it on so a takeover after a crash does not repeat the effect.
   */
  readonly downstreamKey: string;
  /** Aborted when the lease is lost (another request may have taken the key over). */
  readonly signal: AbortSignal;
  /** settlement: 'transaction' only: run your SQL here; it commits with the stored response. */
  readonly transaction: DatabaseTransactionConnection | null;
}

export function downstreamKeyOf(tenant: string, key: string): string {
  return createHash('sha256').update(JSON.stringify([tenant, key])).digest('hex').slice(0, 40);
}
