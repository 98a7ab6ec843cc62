import { performance } from 'node:perf_hooks';
import type { Status } from '../../../src/client/types.js';

/**
 * A Jepsen-style history: every client-visible call is recorded twice, when it is invoked and
 * when its outcome is known. `ok` = the call returned an answer; `fail` = it definitely did not
 * happen (the database refused it, its transaction rolled back); `info` = the outcome is unknown
 * (timeout, lost connection): the call may or may not have taken effect.
 */

export type OpKind =
  | 'claim'
  | 'heartbeat'
  | 'complete'
  | 'fail'
  | 'report_unknown'
  | 'get'
  | 'redrive'
  /** Admin: settle.revoke_binding; args.binding holds the principal and the floor as generation. */
  | 'revoke_binding'
  /** Operator: settle.resolve on a settle_admin login; args.result or args.error holds the verified outcome. */
  | 'resolve'
  /** Nemesis: the test moved a lease into the past (src/testing/clock.ts). */
  | 'expire_lease'
  /** Nemesis: the test terminated a backend. */
  | 'kill_connection';

/** A settle.status value. */
export type StatusName = Status;

/** The reservation lock a call presents. */
export interface BindingArgs {
  readonly principal: string;
  readonly scopes: readonly string[];
  /** Decimal text, so bigint and number generations compare alike. */
  readonly generation: string;
}

/** Arguments of a call, normalized across the raw SQL API and the typed client. */
export interface OpArgs {
  readonly request?: unknown;
  readonly binding?: BindingArgs;
  readonly attempt?: number;
  readonly leaseToken?: string;
  readonly fingerprint?: string;
  readonly result?: unknown;
  readonly error?: unknown;
  readonly retryable?: boolean;
}

/**
 * An answer, normalized: every field the engine may disclose. Absent and null both mean "not
 * disclosed"; the checker insists that conflicts and invalid tokens disclose nothing.
 */
export interface Answer {
  readonly outcome: string;
  readonly reason?: string | null;
  readonly status?: StatusName | null;
  readonly attempt?: number | null;
  readonly settledAttempt?: number | null;
  readonly result?: unknown;
  readonly error?: unknown;
  readonly fingerprint?: string | null;
  readonly leaseToken?: string | null;
  readonly deadLettered?: boolean | null;
  readonly conflictOn?: readonly string[] | null;
}

export interface OpRef {
  readonly process: number;
  readonly tenant: string;
  readonly key: string;
  readonly op: OpKind;
}

export interface InvokeEvent extends OpRef {
  readonly type: 'invoke';
  /** Shared by the invoke and its completion. */
  readonly id: number;
  readonly args: OpArgs;
  /** Monotonic milliseconds (performance.now()). */
  readonly time: number;
}

export interface ErrorSummary {
  readonly name: string;
  readonly code?: string;
  readonly message: string;
}

export interface CompletionEvent extends OpRef {
  readonly type: 'ok' | 'fail' | 'info';
  readonly id: number;
  readonly time: number;
  readonly answer?: Answer;
  readonly error?: ErrorSummary;
}

export type HistoryEvent = InvokeEvent | CompletionEvent;

/** One call with both ends: what the checker works on. */
export interface CompletedOp extends OpRef {
  readonly id: number;
  readonly args: OpArgs;
  readonly type: 'ok' | 'fail' | 'info';
  readonly invokedAt: number;
  readonly completedAt: number;
  readonly answer?: Answer;
  readonly error?: ErrorSummary;
}

/** Names of client errors whose call may or may not have committed. */
const UNKNOWN_OUTCOME_ERRORS = new Set(['SettleConnectionError', 'SettleTimeoutError']);

/**
 * `fail` only when the database definitely refused the call: an engine error (SQLSTATE class
 * SE, raised before anything is written) or a typed client error that says so. Anything else
 * (connection loss, timeouts, cancellations, unexpected errors) is `info`: the conservative
 * choice, since the checker never assumes an `info` call had no effect.
 */
export function classifyError(error: unknown): 'fail' | 'info' {
  const name = error instanceof Error ? error.name : '';
  if (UNKNOWN_OUTCOME_ERRORS.has(name)) return 'info';
  const code = sqlState(error);
  return code !== undefined && code.startsWith('SE') ? 'fail' : 'info';
}

/** The SQLSTATE of an error or of its cause chain, if any. */
export function sqlState(error: unknown): string | undefined {
  for (let e: unknown = error, depth = 0; e !== null && typeof e === 'object' && depth < 5; depth += 1) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    const sqlStateField = (e as { sqlState?: unknown }).sqlState;
    if (typeof sqlStateField === 'string') return sqlStateField;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function summarize(error: unknown): ErrorSummary {
  const code = sqlState(error);
  const name = error instanceof Error ? error.name : typeof error;
  const message = error instanceof Error ? error.message : String(error);
  return code === undefined ? { name, message } : { name, code, message };
}

export class History {
  readonly events: HistoryEvent[] = [];
  private readonly pending = new Map<number, InvokeEvent>();
  private nextId = 0;

  /** Records the invocation; returns its id for ok/fail/info. */
  invoke(ref: OpRef, args: OpArgs): number {
    const id = this.nextId;
    this.nextId += 1;
    const event: InvokeEvent = { type: 'invoke', id, ...ref, args, time: performance.now() };
    this.events.push(event);
    this.pending.set(id, event);
    return id;
  }

  complete(id: number, type: CompletionEvent['type'], detail: { answer?: Answer; error?: unknown }): void {
    const invoke = this.pending.get(id);
    if (invoke === undefined) throw new Error(`history: no pending invocation ${id}`);
    this.pending.delete(id);
    const { process, tenant, key, op } = invoke;
    const event: CompletionEvent = {
      type,
      id,
      process,
      tenant,
      key,
      op,
      time: performance.now(),
      ...(detail.answer === undefined ? {} : { answer: detail.answer }),
      ...(detail.error === undefined ? {} : { error: summarize(detail.error) }),
    };
    this.events.push(event);
  }

  /**
   * Runs `call`, recording invoke and outcome. Resolves to the answer (`ok`) or to the error
   * (`fail`/`info`); never rejects, so a workload can carry on.
   */
  async record(
    ref: OpRef,
    args: OpArgs,
    call: () => Promise<Answer>,
  ): Promise<{ type: 'ok'; answer: Answer } | { type: 'fail' | 'info'; error: unknown }> {
    const id = this.invoke(ref, args);
    try {
      const answer = await call();
      this.complete(id, 'ok', { answer });
      return { type: 'ok', answer };
    } catch (error) {
      const type = classifyError(error);
      this.complete(id, type, { error });
      return { type, error };
    }
  }

  /** Calls paired with their completion; calls still pending are left out. */
  ops(): CompletedOp[] {
    return pairOps(this.events);
  }
}

export function pairOps(events: readonly HistoryEvent[]): CompletedOp[] {
  const invokes = new Map<number, InvokeEvent>();
  const out: CompletedOp[] = [];
  for (const event of events) {
    if (event.type === 'invoke') {
      invokes.set(event.id, event);
      continue;
    }
    const invoke = invokes.get(event.id);
    if (invoke === undefined) throw new Error(`history: completion ${event.id} without invocation`);
    out.push({
      id: event.id,
      process: invoke.process,
      tenant: invoke.tenant,
      key: invoke.key,
      op: invoke.op,
      args: invoke.args,
      type: event.type,
      invokedAt: invoke.time,
      completedAt: event.time,
      ...(event.answer === undefined ? {} : { answer: event.answer }),
      ...(event.error === undefined ? {} : { error: event.error }),
    });
  }
  return out;
}

/** Counts of a history: calls by kind (`claim`), by type (`type:ok`) and by answer (`claim:replay`). */
export function summarizeHistory(ops: readonly CompletedOp[]): Record<string, number> {
  const counts: Record<string, number> = { total: ops.length };
  for (const op of ops) {
    counts[op.op] = (counts[op.op] ?? 0) + 1;
    counts[`type:${op.type}`] = (counts[`type:${op.type}`] ?? 0) + 1;
    if (op.type === 'ok' && op.answer !== undefined) {
      const label = `${op.op}:${op.answer.outcome}`;
      counts[label] = (counts[label] ?? 0) + 1;
    }
  }
  return counts;
}
