import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordFigures } from './harness/figures.js';
import type { Step, Violation } from './harness/model-driver.js';
import { openModelSession, type ModelSession } from './harness/model-session.js';
import { useReliabilityDatabase } from './support/database.js';

// The model-based test of issue 18 part B: random sequences of claim / heartbeat / complete /
// fail / report_unknown / get / expire_leases / redrive / revoke_binding / purge over two
// operations, three settle_app connections and an admin login, with row-lock waits (some held
// past the waiter's lease), rolled-back caller transactions, lapsed leases and revocations that
// commit during a wait. Every answer must be one the reference model (src/model/protocol-model.ts)
// allows, and the global invariants must hold after every step (harness/model-driver.ts).
//
// MODEL_SEED fixes the seed; MODEL_RUNS the number of sequences (CI: 40); MODEL_STEPS their
// length. `npm run test:soak` runs it long (RELIABILITY_SOAK=1: 2,000 sequences unless MODEL_RUNS).

const seed = Number(process.env.MODEL_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.MODEL_RUNS ?? (process.env.RELIABILITY_SOAK === '1' ? 2000 : 40));
const length = Number(process.env.MODEL_STEPS ?? 30);

export function describeViolation(v: Violation): string {
  return `sequence ${v.sequence}, step ${v.step}: ${v.kind}\n${v.detail}\n` +
    `regression case: { maxAttempts: ${JSON.stringify(v.maxAttempts)}, steps: ${JSON.stringify(v.steps)} }`;
}

const db = useReliabilityDatabase('model_based');
let session: ModelSession;
beforeAll(async () => {
  session = await openModelSession(db.url, 'm');
});
afterAll(async () => {
  await session?.close();
});

describe('the engine against the reference model', () => {
  it(`${runs} random sequences of ${length} steps (seed ${seed}) answer as the model allows`, async () => {
    const started = Date.now();
    for (let i = 0; i < runs; i++) {
      const ok = await session.run.randomSequence(seed, i, length);
      if (!ok) break;
    }
    const f = session.run.figures;
    recordFigures({
      scenario: 'model-based',
      operations: f.calls,
      faults: f.waits + f.rollbacks + f.longWaits,
      violations: session.run.violations.length,
      details: { seed, sequences: f.sequences, steps: f.steps, interleavings: f.interleavings, waits: f.waits, longWaits: f.longWaits, rollbacks: f.rollbacks, revokesDuringWait: f.revokesDuringWait, seconds: Math.round((Date.now() - started) / 1000) },
    });
    console.log(JSON.stringify({ model: 'random', seed, ...f, seconds: (Date.now() - started) / 1000 }));
    expect(session.run.violations.map(describeViolation)).toEqual([]);
  }, 600_000);
});

/**
 * Regression cases: sequences the random run found on main before the issue-18 fixes (kept as
 * scripts: the same steps, whatever the seed). `maxAttempts` is per operation.
 */
const REGRESSIONS: readonly { readonly name: string; readonly maxAttempts: readonly number[]; readonly steps: readonly Step[] }[] = [
  {
    // Defect 1: the waiter's lease was computed from its call start, before the lock wait.
    name: 'R1: a claim that waited for the row lock gets a lease measured from after the lock',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: true } },
      { t: 'end', commit: false, longWait: true },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // Defect 1, heartbeat: an extension decided after a wait is measured from the decision.
    name: 'R1: a heartbeat that waited for the row lock extends from after the lock',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: false } },
      { t: 'call', conn: 2, call: { kind: 'heartbeat', op: 0, ticket: 'latest', short: true } },
      { t: 'end', commit: true, longWait: true },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // Defect 2: the floor was read before the lock wait; the revocation committed during it.
    name: 'R2: a claim waiting while its generation is revoked is refused, never acquired',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'begin', conn: 1 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'revoke', op: 0 },
      { t: 'end', commit: false },
      { t: 'call', conn: 0, call: { kind: 'get', op: 0, variant: 'newer' } },
    ],
  },
  {
    // Defect 4: a conflict (a mismatched success of an attempt that had failed) erased to failed.
    name: 'R4: after a mismatched success the last failure is needs_reconciliation, never failed',
    maxAttempts: [2, 2],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'call', conn: 1, call: { kind: 'complete', op: 0, ticket: 'latest', mismatch: 'generation' } },
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: true } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'redrive', op: 0 },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
    ],
  },
  {
    // Defect 5: a later final failure overrode an earlier unknown.
    name: 'R5: a final failure after an unknown attempt is needs_reconciliation, and its success still settles',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'report_unknown', op: 0, ticket: 'latest' } },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'get', op: 0, variant: 'same' } },
      { t: 'purge' },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'first' } },
    ],
  },
  {
    // Defect 5 with a lapsed lease instead of a reported unknown.
    name: 'R5: a final failure after a lapsed attempt is needs_reconciliation',
    maxAttempts: [3, 3],
    steps: [
      { t: 'call', conn: 0, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'lapse', op: 0 },
      { t: 'call', conn: 1, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 1, call: { kind: 'fail', op: 0, ticket: 'latest', retryable: false } },
      { t: 'call', conn: 2, call: { kind: 'claim', op: 0, variant: 'same', short: false } },
      { t: 'call', conn: 0, call: { kind: 'complete', op: 0, ticket: 'first' } },
    ],
  },
];

describe('regression cases the model found', () => {
  REGRESSIONS.forEach((r, i) => {
    it(r.name, async () => {
      await session.run.script(100_000 + i, r.maxAttempts, r.steps);
      expect(session.run.violations.filter((v) => v.sequence === 100_000 + i).map(describeViolation)).toEqual([]);
    }, 120_000);
  });
});
