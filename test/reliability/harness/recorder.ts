import type { ClaimAnswer, ClaimCall, SettleDriver, Ticket } from './driver.js';
import type { Answer, History, OpArgs, OpKind } from './history.js';

export type Recorded<A extends Answer = Answer> = { type: 'ok'; answer: A } | { type: 'fail' | 'info'; error: unknown };

/** A driver whose every call is recorded in `history` as process `process`. */
export interface RecordingDriver {
  readonly process: number;
  claim(call: ClaimCall): Promise<Recorded<ClaimAnswer>>;
  heartbeat(ticket: Ticket, leaseMs?: number): Promise<Recorded>;
  complete(ticket: Ticket, result: unknown): Promise<Recorded>;
  fail(ticket: Ticket, error: unknown, retryable: boolean): Promise<Recorded>;
  reportUnknown(ticket: Ticket): Promise<Recorded>;
  get(ref: { tenant: string; key: string }): Promise<Recorded>;
}

const ticketArgs = (t: Ticket): OpArgs => ({ attempt: t.attempt, leaseToken: t.leaseToken, fingerprint: t.fingerprint, binding: t.binding });

export function recording(driver: SettleDriver, history: History, process: number): RecordingDriver {
  const run = <A extends Answer>(op: OpKind, ref: { tenant: string; key: string }, args: OpArgs, call: () => Promise<A>) =>
    history.record({ process, tenant: ref.tenant, key: ref.key, op }, args, call) as Promise<Recorded<A>>;
  return {
    process,
    claim: (c) => run('claim', c, { request: c.request, binding: c.binding }, () => driver.claim(c)),
    heartbeat: (t, leaseMs) => run('heartbeat', t, ticketArgs(t), () => driver.heartbeat(t, leaseMs)),
    complete: (t, result) => run('complete', t, { ...ticketArgs(t), result }, () => driver.complete(t, result)),
    fail: (t, error, retryable) => run('fail', t, { ...ticketArgs(t), error, retryable }, () => driver.fail(t, error, retryable)),
    reportUnknown: (t) => run('report_unknown', t, ticketArgs(t), () => driver.reportUnknown(t)),
    get: (ref) => run('get', ref, {}, () => driver.get(ref)),
  };
}

/** The ticket of an acquired claim, or a thrown error describing what came back instead. */
export function acquiredTicket(r: Recorded<ClaimAnswer>): Ticket {
  if (r.type === 'ok' && r.answer.ticket !== undefined) return r.answer.ticket;
  throw new Error(`expected an acquired claim, got ${r.type === 'ok' ? JSON.stringify(r.answer) : String(r.error)}`);
}
