import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { useEngineDatabase } from './support/database.js';
import { newOperation } from './support/fixtures.js';
import { mustGetOperation, storedAttempts, type StoredOperation } from './support/inspect.js';
import { fingerprintOf } from './support/scenarios.js';
import {
  claim,
  complete,
  fail,
  heartbeat,
  reportUnknown,
  ticketOf,
  type ClaimArgs,
  type Ticket,
} from './support/settle.js';

// Random sequences of observations from random attempts on one key, applied one by one on a
// real database; the lattice invariants are checked after every step.
const db = useEngineDatabase('lattice_property');

const RANK: Record<string, number> = { pending: 1, running: 1, unknown: 2, conflict: 3, failed: 4, completed: 5 };

type Step =
  | { kind: 'claim' }
  | { kind: 'expire' }
  | { kind: 'complete'; pick: number; mismatch: 'none' | 'request' | 'generation'; value: number }
  | { kind: 'fail'; pick: number; retryable: boolean }
  | { kind: 'unknown'; pick: number }
  | { kind: 'heartbeat'; pick: number }
  | { kind: 'forged'; pick: number };

const pick = fc.nat({ max: 7 });
const step: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: fc.constant({ kind: 'claim' as const }), weight: 3 },
  { arbitrary: fc.constant({ kind: 'expire' as const }), weight: 2 },
  {
    arbitrary: fc.record({
      kind: fc.constant('complete' as const),
      pick,
      mismatch: fc.constantFrom('none' as const, 'none' as const, 'request' as const, 'generation' as const),
      value: fc.nat({ max: 1000 }),
    }),
    weight: 3,
  },
  { arbitrary: fc.record({ kind: fc.constant('fail' as const), pick, retryable: fc.boolean() }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('unknown' as const), pick }), weight: 2 },
  { arbitrary: fc.record({ kind: fc.constant('heartbeat' as const), pick }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('forged' as const), pick }), weight: 1 },
);

interface Run {
  readonly app: pg.ClientBase;
  readonly admin: pg.ClientBase;
  readonly op: ClaimArgs;
  readonly otherFingerprint: string;
  readonly tickets: Ticket[];
  /** Results sent by lock-matching completes: the only ones that may ever be stored. */
  readonly matchingResults: Set<string>;
}

/** Applies one step; returns whether it was a lock-mismatched success and its outcome. */
async function apply(run: Run, s: Step): Promise<{ mismatched: boolean; outcome: string | null }> {
  const { app, admin, op, tickets } = run;
  if (s.kind === 'claim') {
    const row = await claim(app, op);
    if (row.outcome === 'acquired') tickets.push(ticketOf(op, row));
    return { mismatched: false, outcome: row.outcome };
  }
  if (s.kind === 'expire') {
    await expireLease(admin, op.tenant as string, op.key as string);
    return { mismatched: false, outcome: null };
  }
  const ticket = tickets[s.pick % Math.max(tickets.length, 1)];
  if (ticket === undefined) return { mismatched: false, outcome: null };
  switch (s.kind) {
    case 'complete': {
      const mismatched = s.mismatch !== 'none';
      const presented =
        s.mismatch === 'request'
          ? { ...ticket, fingerprint: run.otherFingerprint }
          : s.mismatch === 'generation'
            ? { ...ticket, binding_generation: 2 }
            : ticket;
      const result = { value: s.value, attempt: ticket.attempt, mismatched };
      if (!mismatched) run.matchingResults.add(JSON.stringify(result));
      return { mismatched, outcome: (await complete(app, presented, result)).outcome };
    }
    case 'fail':
      return {
        mismatched: false,
        outcome: (await fail(app, ticket, { code: 'e', attempt: ticket.attempt }, s.retryable)).outcome,
      };
    case 'unknown':
      return { mismatched: false, outcome: (await reportUnknown(app, ticket)).outcome };
    case 'heartbeat':
      return { mismatched: false, outcome: (await heartbeat(app, ticket)).outcome };
    case 'forged':
      return {
        mismatched: false,
        outcome: (await complete(app, { ...ticket, lease_token: randomUUID() }, { forged: true })).outcome,
      };
  }
}

async function checkInvariants(
  run: Run,
  before: StoredOperation | undefined,
  s: Step,
  applied: { mismatched: boolean; outcome: string | null },
): Promise<StoredOperation | undefined> {
  const { admin, op } = run;
  if (run.tickets.length === 0) return before;
  const after = await mustGetOperation(admin, op.tenant as string, op.key as string);
  const attempts = await storedAttempts(admin, op.tenant as string, op.key as string);
  const settled = attempts.filter((a) => a.settled);
  const context = JSON.stringify({ step: s, applied, before: before?.row_text, after: after.row_text });

  expect(settled.length, context).toBeLessThanOrEqual(1);
  if (after.status === 'completed') {
    expect(
      settled.map((a) => a.attempt),
      context,
    ).toEqual([after.settled_attempt]);
    expect(run.matchingResults.has(JSON.stringify(after.result)), context).toBe(true);
  } else {
    expect(settled, context).toEqual([]);
    expect(after.result, context).toBeNull();
  }
  // Timeout means unknown: failed only for a committed failure (a final failure, or every
  // attempt recorded a failure); a dead letter where an attempt may have taken effect stays
  // unknown (or conflict) and says it needs reconciliation.
  if (after.status === 'failed') {
    const committed =
      attempts.some((a) => a.observation === 'failed' && a.retryable === false) ||
      attempts.every((a) => a.observation === 'failed');
    expect(committed, context).toBe(true);
  }
  if (after.dead_letter_reason === 'needs_reconciliation')
    expect(['unknown', 'conflict'], context).toContain(after.status);
  if (after.dead_letter_reason === 'attempts_exhausted') expect(after.status, context).toBe('failed');
  expect(after.fingerprint, context).toBe(run.tickets[0]?.fingerprint);
  expect(after.binding_generation, context).toBe('1');

  if (before !== undefined) {
    expect(RANK[after.status] ?? 0, context).toBeGreaterThanOrEqual(RANK[before.status] ?? 0);
    if (before.result_text !== null) {
      expect(after.result_text, context).toBe(before.result_text);
      expect(after.settled_attempt, context).toBe(before.settled_attempt);
    }
  }
  if (applied.mismatched || s.kind === 'forged') {
    expect(applied.outcome, context).not.toBe('settled');
    expect(after.result_text, context).toBe(before?.result_text ?? null);
    expect(after.settled_attempt, context).toBe(before?.settled_attempt ?? null);
  }
  return after;
}

describe('lattice invariants under random observation sequences', () => {
  it('status rank never drops, the result never changes once set, one settlement at most, mismatches never settle', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const otherFingerprint = await fingerprintOf(admin, { amount: '1.00', to: 'elsewhere' });
    const statusesSeen = new Set<string>();

    await fc.assert(
      fc.asyncProperty(
        fc.array(step, { minLength: 1, maxLength: 25 }),
        fc.integer({ min: 1, max: 6 }),
        async (steps, maxAttempts) => {
          const run: Run = {
            app,
            admin,
            op: newOperation('prop', { max_attempts: maxAttempts }),
            otherFingerprint,
            tickets: [],
            matchingResults: new Set(),
          };
          let before: StoredOperation | undefined;
          for (const s of [{ kind: 'claim' } as const, ...steps]) {
            const applied = await apply(run, s);
            before = await checkInvariants(run, before, s, applied);
            if (before !== undefined) statusesSeen.add(before.status);
          }
        },
      ),
      { numRuns: 40 },
    );
    // The generator is not vacuous: the sequences reached every part of the lattice.
    expect([...statusesSeen].sort()).toEqual(
      expect.arrayContaining(['completed', 'conflict', 'failed', 'running', 'unknown']),
    );
  });
});
