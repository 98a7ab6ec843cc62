import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordFigures } from './harness/figures.js';
import type { Violation } from './harness/model-driver.js';
import { REGRESSIONS } from './harness/model-regressions.js';
import { openModelSession, type ModelSession } from './harness/model-session.js';
import { useReliabilityDatabase } from './support/database.js';

// The model-based test: random sequences of claim / heartbeat / complete /
// fail / report_unknown / get / expire_leases / redrive / revoke_binding / purge over two
// operations, three settle_app connections and an admin login, with row-lock waits (some held
// past the waiter's lease), rolled-back caller transactions, lapsed leases and revocations that
// commit during a wait. Every answer must be one the reference model (src/model/protocol-model.ts)
// allows, and the global invariants must hold after every step (harness/model-driver.ts).
//
// MODEL_SEED fixes the seed; MODEL_RUNS the number of sequences (CI: 25); MODEL_STEPS their
// length. `npm run test:soak` runs it long (RELIABILITY_SOAK=1: 1,000 sequences unless MODEL_RUNS).

const seed = Number(process.env.MODEL_SEED ?? Math.floor(Math.random() * 2 ** 31));
const runs = Number(process.env.MODEL_RUNS ?? (process.env.RELIABILITY_SOAK === '1' ? 1000 : 25));
const length = Number(process.env.MODEL_STEPS ?? 30);

export function describeViolation(v: Violation): string {
  return (
    `sequence ${v.sequence}, step ${v.step}: ${v.kind}\n${v.detail}\n` +
    `regression case: { maxAttempts: ${JSON.stringify(v.maxAttempts)}, steps: ${JSON.stringify(v.steps)} }`
  );
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
      details: {
        seed,
        sequences: f.sequences,
        steps: f.steps,
        interleavings: f.interleavings,
        waits: f.waits,
        longWaits: f.longWaits,
        rollbacks: f.rollbacks,
        revokesDuringWait: f.revokesDuringWait,
        seconds: Math.round((Date.now() - started) / 1000),
      },
    });
    console.log(
      JSON.stringify({
        model: 'random',
        seed,
        ...f,
        feed: session.run.feed?.figures,
        seconds: (Date.now() - started) / 1000,
      }),
    );
    expect(session.run.violations.map(describeViolation)).toEqual([]);
  }, 600_000);
});

describe('regression cases the model found', () => {
  REGRESSIONS.forEach((r, i) => {
    it(r.name, async () => {
      await session.run.script(100_000 + i, r.maxAttempts, r.steps);
      expect(session.run.violations.filter((v) => v.sequence === 100_000 + i).map(describeViolation)).toEqual([]);
    }, 240_000);
  });
});
