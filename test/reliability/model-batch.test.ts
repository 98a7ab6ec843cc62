import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { BATCH_REGRESSIONS, batchSequence, openBatchSession } from './harness/model-batch-driver.js';
import { useReliabilityDatabase } from './support/database.js';

// Batches against the reference model (harness/model-batch-driver.ts): random sequences of
// settle.claim_many and settle.complete_many calls, with forged tokens, mismatched locks and a
// revoked binding among them, and batches made to wait on one of their keys while the binding is
// revoked or a tenth of the lease passes, as settle_app. A batch must be its single calls made at one
// instant. (The concurrent model-based test, model-based.test.ts, drives the single calls; the
// batch path's rules undone one at a time are in model-batch-mutants.test.ts, whose control this
// file is: the scripted sequences pass here.)
const db = useReliabilityDatabase('model_batch');

let sequence = 0;

describe('batches against the reference model', () => {
  it('the scripted sequences answer as the model allows', async () => {
    const session = await openBatchSession(db.url);
    try {
      for (const [i, r] of BATCH_REGRESSIONS.entries()) {
        expect(await session.run(r.steps, `mbr-${i}`), r.name).toBeNull();
      }
    } finally {
      await session.close();
    }
  }, 120_000);

  it('every element of claim_many / complete_many answers as the model allows its single call, in the fixed order', async () => {
    const session = await openBatchSession(db.url);
    try {
      await fc.assert(
        fc.asyncProperty(batchSequence, async (steps) => {
          sequence += 1;
          const violation = await session.run(steps, `mb-${sequence}`);
          if (violation !== null) throw new Error(violation);
        }),
        {
          numRuns: Number(process.env.MODEL_RUNS ?? 30),
          ...(process.env.MODEL_SEED === undefined ? {} : { seed: Number(process.env.MODEL_SEED) }),
        },
      );
    } finally {
      await session.close();
    }
  }, 600_000);
});
