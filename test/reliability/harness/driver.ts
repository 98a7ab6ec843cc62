import type { Answer, BindingArgs } from './history.js';

/** What an observation or heartbeat presents: the attempt, its token and the reservation lock. */
export interface Ticket {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly leaseToken: string;
  readonly fingerprint: string;
  readonly binding: BindingArgs;
}

export interface ClaimCall {
  readonly tenant: string;
  readonly key: string;
  readonly request: unknown;
  readonly binding: BindingArgs;
  readonly leaseMs?: number;
  readonly maxAttempts?: number;
  readonly worker?: string;
}

/** What the lock-gated read presents: the operation and the reservation lock. */
export interface GetCall {
  readonly tenant: string;
  readonly key: string;
  readonly request: unknown;
  readonly binding: BindingArgs;
}

/** An answer plus, for an acquired claim, the ticket for the attempt. */
export type ClaimAnswer = Answer & { readonly ticket?: Ticket };

/**
 * The settle API as the reliability suite drives it, answers normalized to history Answers.
 * Two implementations: over the typed client (client-driver.ts) and over raw SQL rows
 * (sql-driver.ts, which sees every column the engine returns, for the disclosure checks).
 */
export interface SettleDriver {
  claim(call: ClaimCall): Promise<ClaimAnswer>;
  heartbeat(ticket: Ticket, leaseMs?: number): Promise<Answer>;
  complete(ticket: Ticket, result: unknown): Promise<Answer>;
  fail(ticket: Ticket, error: unknown, retryable: boolean): Promise<Answer>;
  reportUnknown(ticket: Ticket): Promise<Answer>;
  get(call: GetCall): Promise<Answer>;
  end(): Promise<void>;
}
