/**
 * The data the invariant checker judges: what the simulator intended and was told (recorded in
 * memory while it ran) and what the database holds afterwards (read back at the end).
 */
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

/** The canonical record, read back from settle.operations. */
export interface OperationRow {
  readonly tenant: string;
  readonly key: string;
  readonly status: string;
  readonly attempt: number;
  readonly settledAttempt: number | null;
  readonly result: unknown;
  readonly request: unknown;
  readonly bindingGeneration: number;
  readonly inFlight: boolean;
  readonly deadLettered: boolean;
}

/** One attempt, read back from settle.attempts. */
export interface AttemptRow {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly observation: string | null;
  readonly settled: boolean;
  readonly endReason: string | null;
}

/** One audit row, read back from settle.audit_log. */
export interface AuditRow {
  readonly tenant: string;
  readonly key: string;
  readonly auditId: bigint;
  readonly event: string;
  readonly outcome: string;
  readonly attempt: number | null;
  readonly statusBefore: string | null;
  readonly statusAfter: string | null;
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

export interface History {
  readonly intended: readonly IntendedOperation[];
  readonly told: readonly ToldAnswer[];
  readonly operations: readonly OperationRow[];
  readonly attempts: readonly AttemptRow[];
  readonly audit: readonly AuditRow[];
  readonly payouts: readonly PayoutRow[];
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
