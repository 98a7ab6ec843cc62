import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrate.js';
import { createTestDatabase } from '../../src/testing/index.js';
import { BATCH_REGRESSIONS, batchSequence, openBatchSession } from './harness/model-batch-driver.js';
import { writeMutatedMigrations, type Replacement } from './harness/mutants.js';

// The batch model test (harness/model-batch-driver.ts) against the batch paths (00016_batch.sql)
// with one rule undone at a time, among them the judgements made again after a batch's wait: each
// mutant is a copy of sql/migrations with exact text replacements (harness/mutants.ts), migrated
// into a fresh database from template0.
// The scripted sequences must report an answer the model does not allow; with
// MODEL_MUTANT_RUNS > 0 (the soak sets 300) random sequences then run until one does too, and
// the number it took is printed. The control is model-batch.test.ts: the same sequences pass on
// the engine. Rules whose removal the batch still survives (the distinct-key test of
// complete_many, the token in its locking read: the counts of locked and settled rows send such
// a batch key by key) are not mutants here: test/engine/batch-set-based.test.ts holds those
// batches to the key-by-key answers.

const BATCH = '00016_batch.sql';
// The set-based paths' access, judged again after their statements that may wait.
const CLAIM_POST_WAIT_ACCESS = `  v_floor := settle_private._access(_claim_new_keys.tenant, _claim_new_keys.principal);
  if v_floor < 0 or _claim_new_keys.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
`;
const COMPLETE_POST_WAIT_ACCESS = `  v_floor := settle_private._access(_complete_holders.tenant, _complete_holders.principal);
  if v_floor < 0 or _complete_holders.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
`;

interface BatchMutant {
  readonly name: string;
  readonly defect: string;
  readonly replacements: readonly Replacement[];
  /** The soak's budget of random sequences for a mutant they reach seldom (at least MODEL_MUTANT_RUNS). */
  readonly soakRuns?: number;
}

const BATCH_MUTANTS: readonly BatchMutant[] = [
  {
    name: 'claim-many-tokens-by-position',
    defect: "set-based claim_many pairs the caller's keys with the tokens of the keys in key order",
    replacements: [
      {
        file: BATCH,
        find: `      join unnest(v_keys, v_tokens, v_fingerprints) n(k, t, f) on n.k = u.k`,
        replace: `      join unnest(v_keys, v_tokens, v_fingerprints) with ordinality n(k, t, f, j) on n.j = u.i`,
      },
    ],
  },
  {
    name: 'complete-many-results-by-position',
    defect: "set-based complete_many stores the results in key order against the caller's keys",
    replacements: [
      {
        file: BATCH,
        find: `  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts, _complete_holders.results,
        v_keys, v_before, v_claim_seqs, v_now;`,
        replace: `  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts,
        (select array_agg(x.r order by x.k collate "C") from unnest(_complete_holders.keys, _complete_holders.results) x(k, r)),
        v_keys, v_before, v_claim_seqs, v_now;`,
      },
    ],
    // Measured: caught by random sequence 12-225 (seeds 1, 5, 7, 99, 12345): it takes a batch of
    // plain successes listed out of key order with different results, then a later read of one.
    soakRuns: 1_000,
  },
  {
    name: 'complete-many-ignores-fingerprint',
    defect: "set-based complete_many settles a holder's success whose fingerprint is not the reservation's",
    replacements: [
      {
        file: BATCH,
        find: `and o.lease_token = u.t and o.status <> 'completed' and o.fingerprint = u.f`,
        replace: `and o.lease_token = u.t and o.status <> 'completed'`,
      },
    ],
  },
  {
    name: 'claim-many-ignores-floor',
    defect: 'set-based claim_many claims new keys under a revoked binding generation',
    replacements: [
      {
        file: BATCH,
        find: `if v_floor >= 0 and claim_many.binding_generation >= v_floor and settle_private._set_based_batches()`,
        replace: `if v_floor >= 0 and settle_private._set_based_batches()`,
      },
      { file: BATCH, find: CLAIM_POST_WAIT_ACCESS, replace: '' },
    ],
  },
  {
    name: 'complete-many-ignores-floor',
    defect: 'set-based complete_many settles successes presented under a revoked binding generation',
    replacements: [
      {
        file: BATCH,
        find: `if v_floor >= 0 and complete_many.binding_generation >= v_floor and settle_private._set_based_batches()`,
        replace: `if v_floor >= 0 and settle_private._set_based_batches()`,
      },
      { file: BATCH, find: COMPLETE_POST_WAIT_ACCESS, replace: '' },
    ],
  },
  {
    name: 'claim-many-skips-post-wait-access',
    defect: 'set-based claim_many does not judge access again after its insert waited',
    replacements: [{ file: BATCH, find: CLAIM_POST_WAIT_ACCESS, replace: '' }],
  },
  {
    name: 'complete-many-skips-post-wait-access',
    defect: 'set-based complete_many does not judge access again under its row locks',
    replacements: [{ file: BATCH, find: COMPLETE_POST_WAIT_ACCESS, replace: '' }],
  },
  {
    name: 'keyed-skips-post-wait-access',
    defect:
      'a batch decided key by key keeps what it decided before a revocation that committed while a later key waited',
    replacements: [
      {
        file: BATCH,
        find: `    raise sqlstate 'SE098' using message = 'the batch is decided again';`,
        replace: `    null;`,
      },
    ],
  },
  {
    name: 'claim-many-skips-lease-remeasure',
    defect: 'set-based claim_many keeps the leases measured before its insert waited',
    replacements: [
      { file: BATCH, find: `  if v_decided > v_now + _claim_new_keys.lease / 10 then`, replace: `  if false then` },
    ],
  },
  {
    name: 'keyed-skips-lease-remeasure',
    defect: 'claim_many decided key by key keeps the leases of keys decided before a later key waited',
    replacements: [
      { file: BATCH, find: `  if v_end > v_started + claim_many.lease / 10 then`, replace: `  if false then` },
    ],
  },
];

const huntRuns = Number(process.env.MODEL_MUTANT_RUNS ?? (process.env.RELIABILITY_SOAK === '1' ? 300 : 0));
const seed = Number(process.env.MODEL_SEED ?? Math.floor(Math.random() * 2 ** 31));

describe('the batch model test catches the set-based batch rules undone', () => {
  for (const m of BATCH_MUTANTS) {
    it(`${m.name} (defect: ${m.defect})`, async () => {
      const copy = await writeMutatedMigrations(m);
      const db = await createTestDatabase(`model_batch_mutant_${m.name}`, { template: 'template0' });
      const caughtBy: string[] = [];
      let huntedSequences = -1;
      try {
        await migrate(db.url, { dir: copy.dir });
        const session = await openBatchSession(db.url);
        try {
          for (const [i, r] of BATCH_REGRESSIONS.entries()) {
            if ((await session.run(r.steps, `mbr-${i}`)) !== null) caughtBy.push(r.name);
          }
          const hunt = huntRuns > 0 ? Math.max(huntRuns, m.soakRuns ?? 0) : 0;
          const sequences = hunt > 0 ? fc.sample(batchSequence, { seed, numRuns: hunt }) : [];
          for (const [i, steps] of sequences.entries()) {
            if ((await session.run(steps, `mbh-${i}`)) !== null) {
              huntedSequences = i + 1;
              break;
            }
          }
        } finally {
          await session.close();
        }
      } finally {
        await db.drop();
        await copy.remove();
      }
      console.log(
        JSON.stringify({
          mutant: m.name,
          caughtBy,
          seed,
          randomSequencesToCatch: huntRuns > 0 ? huntedSequences : 'not run',
        }),
      );
      expect(caughtBy.length, `no scripted sequence caught ${m.name}`).toBeGreaterThan(0);
      if (huntRuns > 0) expect(huntedSequences, `the random sequences did not catch ${m.name}`).toBeGreaterThan(0);
    }, 300_000);
  }
});
