/**
 * The data the invariant checker judges: what the simulator intended and was told (recorded in
 * memory while it ran) and what the database holds afterwards (read back at the end with
 * src/checker/engine-state.ts, the read-back every history checker shares).
 */
import type { EngineState } from '../checker/engine-state.js';
import type { FaultName } from './config.js';

/** Which caller made a call: the original submission or one of the injected extra ones. */
export type Submission = 'original' | 'duplicate' | 'different-payload' | 'binding-bump';

export type EngineCall = 'claim' | 'heartbeat' | 'complete' | 'fail' | 'reportUnknown';

/** One intended operation: the request and binding the simulator reserved it with. */
export interface IntendedOperation {
  readonly tenant: string;
  readonly key: string;
  readonly amountCents: number;
  readonly bindingGeneration: number;
}

/** One answer the engine gave, as the simulator received it. */
export interface ToldAnswer {
  readonly tenant: string;
  readonly key: string;
  readonly call: EngineCall;
  readonly submission: Submission;
  /** The fault this call belongs to (null: ordinary traffic). */
  readonly fault: FaultName | null;
  /** The attempt the call was made for (observations, heartbeats), null for claims. */
  readonly attempt: number | null;
  readonly outcome: string;
  /** The whole answer, every field as received (for the non-disclosure check). */
  readonly answer: Readonly<Record<string, unknown>>;
}

/**
 * One row of the simulated downstream ledger (settle_sim.sim_payouts): an attempt that ran the
 * effect. `credited` marks the one row per (tenant, key) that actually moved money; the others
 * are attempts the idempotent downstream answered with the existing payout.
 */
export interface PayoutRow {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly payoutId: string;
  readonly amountCents: number;
  readonly bindingGeneration: number;
  readonly credited: boolean;
}

/**
 * One feed event (or, for the naive poller, one settlement row) a downstream consumer applied:
 * a row of settle_sim.sim_rewards, written in the consumer's own transaction.
 */
export interface DeliveryRow {
  readonly consumer: string;
  readonly tenant: string;
  readonly key: string;
  /** The feed's delivery id; null for the naive poller, which has none. */
  readonly eventId: string | null;
  readonly status: 'completed' | 'failed';
  /** A reward was credited (completed payouts only). */
  readonly credited: boolean;
  /** The row's identity: the order the consumer applied its deliveries in (decimal text). */
  readonly deliveryId: string;
}

/** What the simulator recorded, with the engine state read back after the run. */
export interface History extends EngineState {
  readonly intended: readonly IntendedOperation[];
  readonly told: readonly ToldAnswer[];
  readonly payouts: readonly PayoutRow[];
  /** What the downstream consumers applied (every consumer's rows). */
  readonly deliveries: readonly DeliveryRow[];
  /**
   * The consumers held to feed-exactly-once (the feed's reward consumer). The naive poller is
   * not among them: it is the baseline that shows the bug the feed fixes.
   */
  readonly consumers: readonly string[];
}

/** The result the simulator settles with: it names the payout that moved the money. */
export interface PayoutResult {
  readonly payout_id: string;
  readonly amount_cents: number;
  readonly credited_by_attempt: number;
}

export function operationId(tenant: string, key: string): string {
  return `${tenant}/${key}`;
}
