import type pg from 'pg';
import type { ClaimAnswer, ClaimCall, GetCall, SettleDriver, Ticket } from './driver.js';
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
  get(call: GetCall): Promise<Recorded>;
  /** settle.revoke_binding on `admin` (an admin or superuser session), recorded like a call. */
  revokeBinding(admin: pg.ClientBase, tenant: string, principal: string, belowGeneration: number): Promise<Recorded>;
}

const ticketArgs = (t: Ticket): OpArgs => ({
  attempt: t.attempt,
  leaseToken: t.leaseToken,
  fingerprint: t.fingerprint,
  binding: t.binding,
});

export function recording(driver: SettleDriver, history: History, process: number): RecordingDriver {
  const run = <A extends Answer>(
    op: OpKind,
    ref: { tenant: string; key: string },
    args: OpArgs,
    call: () => Promise<A>,
  ) => history.record({ process, tenant: ref.tenant, key: ref.key, op }, args, call) as Promise<Recorded<A>>;
  return {
    process,
    claim: (c) => run('claim', c, { request: c.request, binding: c.binding }, () => driver.claim(c)),
    heartbeat: (t, leaseMs) => run('heartbeat', t, ticketArgs(t), () => driver.heartbeat(t, leaseMs)),
    complete: (t, result) => run('complete', t, { ...ticketArgs(t), result }, () => driver.complete(t, result)),
    fail: (t, error, retryable) =>
      run('fail', t, { ...ticketArgs(t), error, retryable }, () => driver.fail(t, error, retryable)),
    reportUnknown: (t) => run('report_unknown', t, ticketArgs(t), () => driver.reportUnknown(t)),
    get: (c) => run('get', c, { request: c.request, binding: c.binding }, () => driver.get(c)),
    revokeBinding: (admin, tenant, principal, below) =>
      run(
        'revoke_binding',
        { tenant, key: '-' },
        { binding: { principal, scopes: [], generation: String(below) } },
        async () => {
          const { rows } = await admin.query<{ floor: string }>(
            'select settle.revoke_binding(tenant => $1, principal => $2, below_generation => $3)::text as floor',
            [tenant, principal, below],
          );
          return { outcome: 'revoked', reason: rows[0]?.floor ?? null };
        },
      ),
  };
}

/** The ticket of an acquired claim, or a thrown error describing what came back instead. */
export function acquiredTicket(r: Recorded<ClaimAnswer>): Ticket {
  if (r.type === 'ok' && r.answer.ticket !== undefined) return r.answer.ticket;
  throw new Error(`expected an acquired claim, got ${r.type === 'ok' ? JSON.stringify(r.answer) : String(r.error)}`);
}
