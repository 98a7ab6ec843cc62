import { isDeepStrictEqual } from 'node:util';
import type { AttemptRow, OperationRow } from '../checker/engine-state.js';
import {
  byAuditId,
  describeInvariant,
  groupByKey,
  isSnapshotRead,
  keyOf,
  type InvariantName as SharedInvariantName,
} from '../checker/invariants.js';
import { finalOutcomes, resolutions } from '../checker/outcomes.js';
import { rankOf } from '../checker/status-rank.js';
import { operationId, type DeliveryRow, type History, type PayoutRow, type ToldAnswer } from './history.js';
import type { AuditRow } from '../checker/engine-state.js';

/**
 * The invariant checker: a pure function over a History (no database, no clock), so it can be
 * fed hand-built histories in tests. See docs/simulator.md for the precise definitions.
 */

/**
 * What the simulator checks, in report order: the engine's invariants it can judge from its own
 * answers and the read-back (names and descriptions from src/checker/invariants.ts, shared with
 * the reliability suite), plus its ledger's.
 */
const CHECKED = [
  'every-operation-final',
  'single-settlement',
  'no-double-pay',
  'no-lost-payout',
  'acknowledged-completion-durable',
  'status-monotonic',
  'conflict-discloses-nothing',
  'resolution-final',
  'feed-exactly-once',
] as const satisfies readonly SharedInvariantName[];

export type InvariantName = (typeof CHECKED)[number];

export const INVARIANTS: readonly { readonly name: InvariantName; readonly description: string }[] = CHECKED.map(
  (name) => ({
    name,
    description: describeInvariant(name),
  }),
);

export interface InvariantResult {
  readonly name: InvariantName;
  readonly description: string;
  readonly ok: boolean;
  /** How many items (operations, audit trails, answers) were checked. */
  readonly checked: number;
  readonly violationCount: number;
  /** The first violations, one line each. */
  readonly violations: readonly string[];
}

export interface CheckReport {
  readonly ok: boolean;
  readonly invariants: readonly InvariantResult[];
}

const MAX_LISTED = 20;

/** Answer fields a conflict may carry; anything else that is set is a disclosure. */
const CONFLICT_MAY_CARRY = new Set(['outcome', 'reason', 'conflictOn', 'conflict_on']);

export function checkHistory(history: History): CheckReport {
  const index = indexHistory(history);
  const results: InvariantResult[] = [
    everyOperationFinal(history, index),
    singleSettlement(history, index),
    noDoublePay(history, index),
    noLostPayout(history, index),
    acknowledgedCompletionDurable(history, index),
    statusMonotonic(history),
    conflictDisclosesNothing(history, index),
    resolutionFinal(history, index),
    feedExactlyOnce(history, index),
  ];
  return { ok: results.every((r) => r.ok), invariants: results };
}

interface HistoryIndex {
  readonly operations: Map<string, OperationRow>;
  readonly attempts: Map<string, AttemptRow[]>;
  readonly payouts: Map<string, PayoutRow[]>;
  readonly told: Map<string, ToldAnswer[]>;
  readonly audit: Map<string, AuditRow[]>;
}

function indexHistory(history: History): HistoryIndex {
  return {
    operations: new Map(history.operations.map((op) => [keyOf(op), op])),
    attempts: groupByKey(history.attempts),
    payouts: groupByKey(history.payouts),
    told: groupByKey(history.told),
    audit: groupByKey(history.audit),
  };
}

/** Each intended operation with its display id, its map key and its read-back record. */
function* intendedOperations(history: History, index: HistoryIndex) {
  for (const intended of history.intended) {
    const k = keyOf(intended);
    yield { intended, id: operationId(intended.tenant, intended.key), k, op: index.operations.get(k) };
  }
}

class Collector {
  private readonly lines: string[] = [];
  private count = 0;
  checked = 0;

  constructor(private readonly name: InvariantName) {}

  fail(line: string): void {
    this.count += 1;
    if (this.lines.length < MAX_LISTED) this.lines.push(line);
  }

  result(): InvariantResult {
    return {
      name: this.name,
      description: describeInvariant(this.name),
      ok: this.count === 0,
      checked: this.checked,
      violationCount: this.count,
      violations: this.lines,
    };
  }
}

function everyOperationFinal(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('every-operation-final');
  for (const { id, op } of intendedOperations(history, index)) {
    c.checked += 1;
    if (op === undefined) c.fail(`${id}: no canonical record`);
    else if (op.status !== 'completed' && op.status !== 'failed') c.fail(`${id}: ended ${op.status}`);
    else if (op.inFlight) c.fail(`${id}: ${op.status} but a lease is still live`);
  }
  return c.result();
}

function singleSettlement(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('single-settlement');
  for (const { id, k, op } of intendedOperations(history, index)) {
    if (op === undefined) continue;
    c.checked += 1;
    const settledAttempts = (index.attempts.get(k) ?? []).filter((a) => a.settled);
    const settledAnswers = (index.told.get(k) ?? []).filter((t) => t.call === 'complete' && t.outcome === 'settled');
    // settle.resolve(completed) settles through an attempt epoch of its own: then that epoch is
    // the one settled attempt, and no complete call may have been answered settled.
    const resolvedCompleted = resolutions(index.audit.get(k) ?? []).find((r) => r.statusAfter === 'completed');
    if (op.status === 'completed') {
      if (settledAttempts.length !== 1) {
        c.fail(`${id}: completed with ${settledAttempts.length} settled attempts`);
      } else if (settledAttempts[0]?.attempt !== op.settledAttempt) {
        c.fail(
          `${id}: settled_attempt ${op.settledAttempt} but attempt ${settledAttempts[0]?.attempt} is marked settled`,
        );
      }
      if (resolvedCompleted !== undefined) {
        if (settledAnswers.length !== 0) {
          c.fail(
            `${id}: completed by resolution (attempt ${resolvedCompleted.attempt}), yet ${settledAnswers.length} complete calls were answered settled`,
          );
        }
        if (op.settledAttempt !== resolvedCompleted.attempt) {
          c.fail(
            `${id}: completed by resolution as attempt ${resolvedCompleted.attempt}, but settled_attempt is ${op.settledAttempt}`,
          );
        }
      } else if (settledAnswers.length !== 1) {
        c.fail(`${id}: completed, but ${settledAnswers.length} complete calls were answered settled`);
      }
    } else if (settledAttempts.length > 0) {
      c.fail(`${id}: ${op.status}, yet attempt ${settledAttempts[0]?.attempt} is marked settled`);
    }
    for (const told of index.told.get(k) ?? []) {
      if (told.submission !== 'original' && told.submission !== 'duplicate') continue;
      const result = told.answer.result;
      // A result without a completed record is a lost settlement (acknowledged-completion-durable).
      if (result === undefined || result === null || op.status !== 'completed') continue;
      if (!isDeepStrictEqual(result, op.result)) {
        c.fail(`${id}: ${told.call} answered ${told.outcome} with a result that is not the settlement`);
      }
    }
  }
  return c.result();
}

function creditedPayouts(index: HistoryIndex, k: string): PayoutRow[] {
  return (index.payouts.get(k) ?? []).filter((p) => p.credited);
}

function noDoublePay(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('no-double-pay');
  for (const { id, k } of intendedOperations(history, index)) {
    c.checked += 1;
    const credited = creditedPayouts(index, k);
    if (credited.length > 1) {
      c.fail(`${id}: ${credited.length} credited payouts (attempts ${credited.map((p) => p.attempt).join(', ')})`);
    }
  }
  return c.result();
}

function noLostPayout(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('no-lost-payout');
  for (const { id, k, op } of intendedOperations(history, index)) {
    if (op?.status !== 'completed') continue;
    c.checked += 1;
    const credited = creditedPayouts(index, k);
    if (credited.length === 0) {
      c.fail(`${id}: completed (attempt ${op.settledAttempt}) but no payout was credited`);
      continue;
    }
    const named = payoutIdOf(op.result);
    if (!credited.some((p) => p.payoutId === named)) {
      c.fail(`${id}: the result names payout ${String(named)}, the credited payout is ${credited[0]?.payoutId}`);
    }
  }
  return c.result();
}

function payoutIdOf(result: unknown): string | undefined {
  if (typeof result !== 'object' || result === null) return undefined;
  const value = (result as Record<string, unknown>).payout_id;
  return typeof value === 'string' ? value : undefined;
}

function acknowledgedCompletionDurable(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('acknowledged-completion-durable');
  for (const { id, k, op } of intendedOperations(history, index)) {
    c.checked += 1;
    const credited = creditedPayouts(index, k);
    if (credited.length > 0 && op?.status !== 'completed') {
      c.fail(`${id}: payout ${credited[0]?.payoutId} was credited but the operation is ${op?.status ?? 'missing'}`);
    }
    for (const told of index.told.get(k) ?? []) {
      if (told.call !== 'complete' || told.outcome !== 'settled') continue;
      if (op?.status !== 'completed' || op.settledAttempt !== told.attempt) {
        c.fail(
          `${id}: attempt ${told.attempt} was answered settled, the record says ${op?.status ?? 'missing'} by attempt ${op?.settledAttempt ?? '-'}`,
        );
      }
    }
  }
  return c.result();
}

function statusMonotonic(history: History): InvariantResult {
  const c = new Collector('status-monotonic');
  for (const [, rows] of groupByKey(history.audit)) {
    c.checked += 1;
    const trail = byAuditId(rows);
    const id = operationId(trail[0]?.tenant ?? '', trail[0]?.key ?? '');
    // Snapshot reads must show a status the trail reached, but they do not order it.
    const reached = new Set<string | null>(
      trail.filter((row) => !isSnapshotRead(row)).flatMap((row) => [row.statusBefore, row.statusAfter]),
    );
    let high: string | null = null;
    for (const row of trail) {
      if (row.event === 'purge') break;
      if (row.event === 'redrive') {
        high = row.statusAfter;
        continue;
      }
      if (isSnapshotRead(row)) {
        if (row.statusAfter !== null && !reached.has(row.statusAfter)) {
          c.fail(
            `${id}: audit ${row.auditId} (claim ${row.outcome}) read ${row.statusAfter}, which the trail never reached`,
          );
        }
        continue;
      }
      if (row.statusBefore !== null && row.statusAfter !== null && rankOf(row.statusAfter) < rankOf(row.statusBefore)) {
        c.fail(
          `${id}: audit ${row.auditId} (${row.event} ${row.outcome}) moved ${row.statusBefore} -> ${row.statusAfter}`,
        );
      } else if (row.statusAfter !== null && rankOf(row.statusAfter) < rankOf(high)) {
        c.fail(`${id}: audit ${row.auditId} (${row.event} ${row.outcome}) shows ${row.statusAfter} after ${high}`);
      }
      if (row.statusAfter !== null && rankOf(row.statusAfter) >= rankOf(high)) high = row.statusAfter;
    }
  }
  return c.result();
}

function conflictDisclosesNothing(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('conflict-discloses-nothing');
  for (const told of history.told) {
    const id = operationId(told.tenant, told.key);
    const conflicting = told.submission === 'different-payload' || told.submission === 'binding-bump';
    if (told.outcome !== 'conflict' && !conflicting) continue;
    c.checked += 1;
    if (conflicting && told.outcome !== 'conflict') {
      c.fail(`${id}: a ${told.submission} ${told.call} was answered ${told.outcome}, not conflict`);
    }
    if (told.outcome === 'conflict') {
      const disclosed = Object.entries(told.answer)
        .filter(([field, value]) => !CONFLICT_MAY_CARRY.has(field) && value !== null && value !== undefined)
        .map(([field]) => field);
      if (disclosed.length > 0) c.fail(`${id}: a conflict answer to ${told.call} disclosed ${disclosed.join(', ')}`);
    }
  }
  for (const { intended, id, k, op } of intendedOperations(history, index)) {
    for (const payout of index.payouts.get(k) ?? []) {
      if (payout.amountCents !== intended.amountCents || payout.bindingGeneration !== intended.bindingGeneration) {
        c.fail(
          `${id}: payout ${payout.payoutId} (attempt ${payout.attempt}) ran for ${payout.amountCents} under generation ${payout.bindingGeneration}, not the reserved request`,
        );
      }
    }
    if (op === undefined) continue;
    if (amountOf(op.request) !== intended.amountCents || op.generation !== String(intended.bindingGeneration)) {
      c.fail(`${id}: the reservation holds another request or binding than the one submitted first`);
    }
    if (op.status === 'completed' && amountOf(op.result) !== intended.amountCents) {
      c.fail(`${id}: settled for ${String(amountOf(op.result))}, the reserved amount is ${intended.amountCents}`);
    }
  }
  return c.result();
}

function amountOf(value: unknown): unknown {
  if (typeof value !== 'object' || value === null) return undefined;
  return (value as Record<string, unknown>).amount_cents;
}

function nonBlank(value: unknown): boolean {
  return typeof value === 'string' && value.trim() !== '';
}

/**
 * An operation settle.resolve decided: the resolution is audited (who: the row's actor; why: a
 * reason; the evidence), it is the operation's one final outcome since its last redrive, and
 * nothing moves the operation off the resolved status afterwards (not lowered, not changed).
 */
function resolutionFinal(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('resolution-final');
  for (const { id, k, op } of intendedOperations(history, index)) {
    const trail = byAuditId(index.audit.get(k) ?? []);
    const decided = resolutions(trail);
    const resolution = decided[0];
    if (resolution === undefined) continue;
    c.checked += 1;
    if (decided.length > 1)
      c.fail(`${id}: resolved ${decided.length} times (audit ${decided.map((r) => r.auditId).join(', ')})`);
    const detail = (
      typeof resolution.detail === 'object' && resolution.detail !== null ? resolution.detail : {}
    ) as Record<string, unknown>;
    const missing = [
      ...(nonBlank(resolution.actor) ? [] : ['who']),
      ...(nonBlank(detail.reason) ? [] : ['why']),
      ...(detail.evidence === undefined || detail.evidence === null ? ['evidence'] : []),
    ];
    if (missing.length > 0)
      c.fail(`${id}: the resolution (audit ${resolution.auditId}) records no ${missing.join(', ')}`);
    const resolved = resolution.statusAfter;
    if (op?.status !== resolved)
      c.fail(`${id}: resolved ${String(resolved)}, but the operation is ${op?.status ?? 'missing'}`);
    const at = BigInt(resolution.auditId);
    for (const row of trail) {
      if (BigInt(row.auditId) <= at || isSnapshotRead(row) || row.statusAfter === null) continue;
      if (rankOf(row.statusAfter) < rankOf(resolved)) {
        c.fail(
          `${id}: resolved ${String(resolved)}, then audit ${row.auditId} (${row.event} ${row.outcome}) lowered it to ${row.statusAfter}`,
        );
      } else if (row.statusAfter !== resolved) {
        c.fail(
          `${id}: resolved ${String(resolved)}, then audit ${row.auditId} (${row.event} ${row.outcome}) moved it to ${row.statusAfter}`,
        );
      }
    }
    const redrive = trail.filter((row) => row.event === 'redrive' && BigInt(row.auditId) < at).at(-1);
    const outcomes = finalOutcomes(trail).filter(
      (o) => redrive === undefined || BigInt(o.auditId) > BigInt(redrive.auditId),
    );
    if (outcomes.length !== 1 || outcomes[0]?.auditId !== resolution.auditId) {
      c.fail(
        `${id}: resolved ${String(resolved)}, but the trail has ${outcomes.length} final outcomes (${outcomes.map((o) => `${o.event} ${o.status}`).join(', ')})`,
      );
    }
  }
  return c.result();
}

/**
 * Every final outcome of every operation (each move into completed or failed, from the audit
 * trail) reaches every consumer exactly once: one delivery per outcome, in the key's order, no
 * delivery id twice, and one reward credited per completed payout.
 */
function feedExactlyOnce(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('feed-exactly-once');
  const byConsumer = new Map<string, DeliveryRow[]>();
  for (const row of history.deliveries) {
    if (!history.consumers.includes(row.consumer)) continue;
    let rows = byConsumer.get(row.consumer);
    if (rows === undefined) byConsumer.set(row.consumer, (rows = []));
    rows.push(row);
  }
  for (const consumer of history.consumers) {
    const rows = [...(byConsumer.get(consumer) ?? [])].sort((a, b) =>
      BigInt(a.deliveryId) < BigInt(b.deliveryId) ? -1 : 1,
    );
    const seen = new Map<string, number>();
    for (const row of rows) if (row.eventId !== null) seen.set(row.eventId, (seen.get(row.eventId) ?? 0) + 1);
    const deliveries = groupByKey(rows);
    for (const { id, k, op } of intendedOperations(history, index)) {
      c.checked += 1;
      const expected = finalOutcomes(index.audit.get(k) ?? []).map((o) => o.status);
      const got = deliveries.get(k) ?? [];
      for (const row of got) {
        const times = seen.get(row.eventId ?? '') ?? 0;
        if (times > 1) {
          c.fail(`${id}: event ${String(row.eventId)} was delivered ${times} times to ${consumer}`);
          seen.delete(row.eventId ?? '');
        }
      }
      const statuses = got.map((row) => row.status);
      if (!isDeepStrictEqual(statuses, expected)) {
        c.fail(
          `${id}: ${consumer} received [${statuses.join(', ')}], the trail's final outcomes are [${expected.join(', ')}]`,
        );
      }
      const credits = got.filter((row) => row.credited).length;
      if (credits !== (op?.status === 'completed' ? 1 : 0))
        c.fail(`${id}: ${op?.status ?? 'missing'}, credited ${credits} times by ${consumer}`);
    }
  }
  return c.result();
}
