import { isDeepStrictEqual } from 'node:util';
import { isStatus, statusRank } from '../client/status-rank.js';
import {
  operationId,
  type AttemptRow,
  type AuditRow,
  type History,
  type OperationRow,
  type PayoutRow,
  type ToldAnswer,
} from './history.js';

/**
 * The invariant checker: a pure function over a History (no database, no clock), so it can be
 * fed hand-built histories in tests. See docs/simulator.md for the precise definitions.
 */

export const INVARIANTS = [
  {
    name: 'every-operation-final',
    description: 'every submitted operation ended completed or failed, with no lease left',
  },
  {
    name: 'exactly-one-settlement',
    description: 'a completed operation has exactly one settled attempt, was answered `settled` once, and every caller saw the same result',
  },
  {
    name: 'no-double-pay',
    description: 'at most one payout per operation is credited',
  },
  {
    name: 'no-lost-payout',
    description: 'every completed operation has its credited payout, and its result names that payout',
  },
  {
    name: 'no-lost-settlement',
    description: 'every credited payout belongs to a completed operation, and every `settled` answer is in the record',
  },
  {
    name: 'monotonic-status',
    description: 'in the audit trail of every key (audit_id order) the status rank never went down, except by redrive',
  },
  {
    name: 'conflict-without-disclosure',
    description: 'every conflicting request was refused with `conflict`, the answer disclosed nothing, and it got no payout or settlement',
  },
] as const;

export type InvariantName = (typeof INVARIANTS)[number]['name'];

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
    exactlyOneSettlement(history, index),
    noDoublePay(history, index),
    noLostPayout(history, index),
    noLostSettlement(history, index),
    monotonicStatus(history),
    conflictWithoutDisclosure(history, index),
  ];
  return { ok: results.every((r) => r.ok), invariants: results };
}

interface HistoryIndex {
  readonly operations: Map<string, OperationRow>;
  readonly attempts: Map<string, AttemptRow[]>;
  readonly payouts: Map<string, PayoutRow[]>;
  readonly told: Map<string, ToldAnswer[]>;
}

function indexHistory(history: History): HistoryIndex {
  const group = <T extends { tenant: string; key: string }>(rows: readonly T[]): Map<string, T[]> => {
    const map = new Map<string, T[]>();
    for (const row of rows) {
      const id = operationId(row.tenant, row.key);
      const list = map.get(id);
      if (list === undefined) map.set(id, [row]);
      else list.push(row);
    }
    return map;
  };
  return {
    operations: new Map(history.operations.map((op) => [operationId(op.tenant, op.key), op])),
    attempts: group(history.attempts),
    payouts: group(history.payouts),
    told: group(history.told),
  };
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
    const meta = INVARIANTS.find((i) => i.name === this.name);
    return {
      name: this.name,
      description: meta?.description ?? '',
      ok: this.count === 0,
      checked: this.checked,
      violationCount: this.count,
      violations: this.lines,
    };
  }
}

function everyOperationFinal(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('every-operation-final');
  for (const intended of history.intended) {
    c.checked += 1;
    const id = operationId(intended.tenant, intended.key);
    const op = index.operations.get(id);
    if (op === undefined) c.fail(`${id}: no canonical record`);
    else if (op.status !== 'completed' && op.status !== 'failed') c.fail(`${id}: ended ${op.status}`);
    else if (op.inFlight) c.fail(`${id}: ${op.status} but a lease is still live`);
  }
  return c.result();
}

function exactlyOneSettlement(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('exactly-one-settlement');
  for (const intended of history.intended) {
    const id = operationId(intended.tenant, intended.key);
    const op = index.operations.get(id);
    if (op === undefined) continue;
    c.checked += 1;
    const settledAttempts = (index.attempts.get(id) ?? []).filter((a) => a.settled);
    const settledAnswers = (index.told.get(id) ?? []).filter((t) => t.call === 'complete' && t.outcome === 'settled');
    if (op.status === 'completed') {
      if (settledAttempts.length !== 1) {
        c.fail(`${id}: completed with ${settledAttempts.length} settled attempts`);
      } else if (settledAttempts[0]?.attempt !== op.settledAttempt) {
        c.fail(`${id}: settled_attempt ${op.settledAttempt} but attempt ${settledAttempts[0]?.attempt} is marked settled`);
      }
      if (settledAnswers.length !== 1) c.fail(`${id}: completed, but ${settledAnswers.length} complete calls were answered settled`);
    } else if (settledAttempts.length > 0) {
      c.fail(`${id}: ${op.status}, yet attempt ${settledAttempts[0]?.attempt} is marked settled`);
    }
    for (const told of index.told.get(id) ?? []) {
      if (told.submission !== 'original' && told.submission !== 'duplicate') continue;
      const result = told.answer.result;
      // A result without a completed record is a lost settlement (no-lost-settlement).
      if (result === undefined || result === null || op.status !== 'completed') continue;
      if (!isDeepStrictEqual(result, op.result)) {
        c.fail(`${id}: ${told.call} answered ${told.outcome} with a result that is not the settlement`);
      }
    }
  }
  return c.result();
}

function creditedPayouts(index: HistoryIndex, id: string): PayoutRow[] {
  return (index.payouts.get(id) ?? []).filter((p) => p.credited);
}

function noDoublePay(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('no-double-pay');
  for (const intended of history.intended) {
    c.checked += 1;
    const id = operationId(intended.tenant, intended.key);
    const credited = creditedPayouts(index, id);
    if (credited.length > 1) {
      c.fail(`${id}: ${credited.length} credited payouts (attempts ${credited.map((p) => p.attempt).join(', ')})`);
    }
  }
  return c.result();
}

function noLostPayout(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('no-lost-payout');
  for (const intended of history.intended) {
    const id = operationId(intended.tenant, intended.key);
    const op = index.operations.get(id);
    if (op?.status !== 'completed') continue;
    c.checked += 1;
    const credited = creditedPayouts(index, id);
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

function noLostSettlement(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('no-lost-settlement');
  for (const intended of history.intended) {
    c.checked += 1;
    const id = operationId(intended.tenant, intended.key);
    const op = index.operations.get(id);
    const credited = creditedPayouts(index, id);
    if (credited.length > 0 && op?.status !== 'completed') {
      c.fail(`${id}: payout ${credited[0]?.payoutId} was credited but the operation is ${op?.status ?? 'missing'}`);
    }
    for (const told of index.told.get(id) ?? []) {
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

function monotonicStatus(history: History): InvariantResult {
  const c = new Collector('monotonic-status');
  const trails = new Map<string, AuditRow[]>();
  for (const row of history.audit) {
    const id = operationId(row.tenant, row.key);
    const trail = trails.get(id);
    if (trail === undefined) trails.set(id, [row]);
    else trail.push(row);
  }
  const rank = (status: string | null): number => (status !== null && isStatus(status) ? statusRank(status) : 0);
  for (const [id, trail] of trails) {
    c.checked += 1;
    trail.sort((a, b) => (a.auditId < b.auditId ? -1 : a.auditId > b.auditId ? 1 : 0));
    // Claims answered without a change read their snapshot without the row lock, so their rows
    // may land after a concurrent transition: they must show a status the trail reached, but
    // they do not order it (docs/protocol.md, audit log).
    const reached = new Set(trail.filter((row) => !readOnlyClaim(row)).flatMap((row) => [row.statusBefore, row.statusAfter]));
    let high: string | null = null;
    for (const row of trail) {
      if (row.event === 'purge') break;
      if (row.event === 'redrive') {
        high = row.statusAfter;
        continue;
      }
      if (readOnlyClaim(row)) {
        if (row.statusAfter !== null && !reached.has(row.statusAfter)) {
          c.fail(`${id}: audit ${row.auditId} (claim ${row.outcome}) read ${row.statusAfter}, which the trail never reached`);
        }
        continue;
      }
      if (row.statusBefore !== null && row.statusAfter !== null && rank(row.statusAfter) < rank(row.statusBefore)) {
        c.fail(`${id}: audit ${row.auditId} (${row.event} ${row.outcome}) moved ${row.statusBefore} -> ${row.statusAfter}`);
      } else if (row.statusAfter !== null && rank(row.statusAfter) < rank(high)) {
        c.fail(`${id}: audit ${row.auditId} (${row.event} ${row.outcome}) shows ${row.statusAfter} after ${high}`);
      }
      if (row.statusAfter !== null && rank(row.statusAfter) >= rank(high)) high = row.statusAfter;
    }
  }
  return c.result();
}

/** A claim answered from a plain read (replay, in_progress, conflict, failed): not a transition. */
function readOnlyClaim(row: AuditRow): boolean {
  return row.event === 'claim' && row.outcome !== 'acquired' && row.statusBefore === row.statusAfter;
}

function conflictWithoutDisclosure(history: History, index: HistoryIndex): InvariantResult {
  const c = new Collector('conflict-without-disclosure');
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
  for (const intended of history.intended) {
    const id = operationId(intended.tenant, intended.key);
    for (const payout of index.payouts.get(id) ?? []) {
      if (payout.amountCents !== intended.amountCents || payout.bindingGeneration !== intended.bindingGeneration) {
        c.fail(
          `${id}: payout ${payout.payoutId} (attempt ${payout.attempt}) ran for ${payout.amountCents} under generation ${payout.bindingGeneration}, not the reserved request`,
        );
      }
    }
    const op = index.operations.get(id);
    if (op === undefined) continue;
    if (amountOf(op.request) !== intended.amountCents || op.bindingGeneration !== intended.bindingGeneration) {
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
