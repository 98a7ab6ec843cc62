import { hash } from 'node:crypto';
import type { DatabaseTransactionConnection } from 'slonik';
import type { EarlierAttempts } from '../../client/types.js';

/** What the handler gets while it runs under a key (`req.idempotency` / `request.idempotency`). */
export interface IdempotencyContext {
  /** The Idempotency-Key as parsed. */
  readonly key: string;
  /** The key the engine stores: `keyPrefix` + key (the key itself without a prefix). */
  readonly operationKey: string;
  readonly tenant: string;
  /** The attempt this handler runs as (1 on the first request, higher after a takeover). */
  readonly attempt: number;
  /**
   * What earlier attempts of this key may have done, as the client's run() reports it
   * (docs/client.md): `mayHaveTakenEffect` after a takeover (a crashed or timed-out handler),
   * `reportedUnknown` when an earlier attempt's outcome was reported unknown (a 504, a handler
   * timeout). Look the effect up downstream by `downstreamKey` before doing it again.
   */
  readonly earlier: EarlierAttempts;
  /**
   * A key for your downstream calls (payment provider, email API), the same for every attempt of
   * this (tenant, key): pass it on so a takeover after a crash does not repeat the effect.
   * `downstreamKeyOf(tenant, operationKey)` computes it (a reconciler has both).
   */
  readonly downstreamKey: string;
  /** Aborted when the lease is lost (another request may have taken the key over). */
  readonly signal: AbortSignal;
  /** settlement: 'transaction' only: run your SQL here; it commits with the stored response. */
  readonly transaction: DatabaseTransactionConnection | null;
}

/**
 * The `downstreamKey` the HTTP middleware hands its handler for the operation (tenant, key): the
 * first 40 hex digits of SHA-256 over the JSON array [tenant, key]. `key` is the key the engine
 * stores (keyPrefix included), as a reconciler, the feed and `pg-settle inspect` show it.
 */
export function downstreamKeyOf(tenant: string, key: string): string {
  return hash('sha256', JSON.stringify([tenant, key]), 'hex').slice(0, 40);
}
