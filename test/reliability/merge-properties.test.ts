import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { roleUrl } from './harness/app-url.js';
import { canonicalJson } from './harness/canonical-json.js';
import { recordFigures } from './harness/figures.js';
import type { SettleDriver, Ticket } from './harness/driver.js';
import { rank } from './harness/invariants.js';
import type { StatusName } from './harness/history.js';
import { createSqlDriver } from './harness/sql-driver.js';
import { expireLease } from '../../src/testing/clock.js';
import { useReliabilityDatabase } from './support/database.js';

// The binding-gated merge as a join on the lattice. Each fresh key gets attempts 1 and 2
// (superseded: their leases lapsed and a later claim took over) and attempt 3 (the lease
// holder). Each attempt tells one consistent story (succeeded, failed, unknown, silent), told
// once or repeated; a stale worker may report a success under a bumped binding generation
// (a mismatched lock). The same
// multiset of observations is applied in two different orders (fast-check permutations) to
// two fresh keys, and the final canonical state must be the join the lattice prescribes:
//  * any matching success -> completed, settled by the FIRST success to arrive, with its
//    result byte for byte, exactly one settled attempt (whatever else arrived, in any order);
//  * no success -> the lease holder's story joined with `conflict` if a forged success came;
//    stale attempts' failures and unknowns change nothing;
//  * repeating an observation (idempotence) changes nothing.

const db = useReliabilityDatabase('merge_props');
const TENANT = 'merge';
const BINDING = { principal: 'alice', scopes: ['pay'], generation: '1' };

type Story = 'success' | 'success-after-unknown' | 'fail-retryable' | 'fail-final' | 'unknown' | 'silent';
interface Observation {
  readonly attempt: 1 | 2 | 3 | 'forged';
  readonly kind: 'complete' | 'fail-retryable' | 'fail-final' | 'unknown';
}

function observationsOf(stories: readonly Story[], repeats: readonly number[], forged: boolean): Observation[] {
  const out: Observation[] = [];
  stories.forEach((story, i) => {
    const attempt = (i + 1) as 1 | 2 | 3;
    const times = repeats[i] ?? 1;
    const push = (kind: Observation['kind']) => {
      for (let n = 0; n < times; n += 1) out.push({ attempt, kind });
    };
    if (story === 'success') push('complete');
    if (story === 'success-after-unknown') out.push({ attempt, kind: 'unknown' }), push('complete');
    if (story === 'fail-retryable' || story === 'fail-final' || story === 'unknown') push(story);
  });
  if (forged) out.push({ attempt: 'forged', kind: 'complete' });
  return out;
}

/**
 * What the lattice prescribes, independent of order except which success came first and whether
 * attempt 1's forged success came before its real one (an attempt that presented a
 * mismatched lock is fenced from then on, so its later real success does not count).
 */
function expectedStatus(stories: readonly Story[], forged: boolean, order: readonly Observation[]): StatusName {
  if (firstSuccess(order) !== null) return 'completed';
  // Attempts 1 and 2 always lost their leases without recording a failure (a superseded
  // attempt's failure is fenced), so they may have taken effect: the holder's final failure
  // leaves the operation unknown, dead-lettered needs_reconciliation, never failed.
  const byStory: Record<string, StatusName> = {
    'fail-retryable': 'pending',
    'fail-final': 'unknown',
    unknown: 'unknown',
    silent: 'running',
  };
  const holder = byStory[stories[2] ?? 'silent'] ?? 'running';
  return forged && rank(holder) < rank('conflict') ? 'conflict' : holder;
}

const resultOf = (attempt: number) => ({ receipt: `r-${attempt}`, amount: 10.5, lines: [attempt, 1] });

let app: pg.Client;
let admin: pg.Client;
let driver: SettleDriver;
let keys = 0;
/** Figures: engine calls, leases moved into the past, observations applied, forged successes. */
const figures = { calls: 0, expiries: 0, observations: 0, forged: 0, runs: 0, failedRuns: 0 };

beforeAll(async () => {
  app = new pg.Client({ connectionString: roleUrl(db.url, 'reliability-merge') });
  await app.connect();
  admin = await db.connect();
  driver = createSqlDriver(app);
});
afterAll(async () => {
  await app?.end();
});

async function acquire(key: string): Promise<Ticket> {
  const a = await driver.claim({ tenant: TENANT, key, request: { key }, binding: BINDING, maxAttempts: 10 });
  if (a.ticket === undefined) throw new Error(`expected acquired, got ${JSON.stringify(a)}`);
  return a.ticket;
}

interface Canonical {
  status: StatusName;
  resultText: string | null;
  settledAttempt: number | null;
  error: string | null;
  settledRows: number;
}

/** Fresh key, attempts 1-3, then `order` applied one call at a time. */
async function apply(order: readonly Observation[]): Promise<Canonical> {
  keys += 1;
  const key = `m-${keys}`;
  const tickets: Ticket[] = [];
  for (let i = 0; i < 3; i += 1) {
    if (i > 0) await expireLease(admin, TENANT, key);
    if (i > 0) figures.expiries += 1;
    tickets.push(await acquire(key));
    figures.calls += 1;
  }
  figures.calls += order.length;
  figures.observations += order.length;
  figures.forged += order.filter((o) => o.attempt === 'forged').length;
  for (const o of order) {
    // The forger is attempt 1's worker after a re-authentication bumped its binding generation.
    const t =
      o.attempt === 'forged' ? { ...tickets[0]!, binding: { ...BINDING, generation: '2' } } : tickets[o.attempt - 1]!;
    if (o.kind === 'complete')
      await driver.complete(t, o.attempt === 'forged' ? { forged: true } : resultOf(t.attempt));
    if (o.kind === 'fail-retryable') await driver.fail(t, { code: 'retry', attempt: t.attempt }, true);
    if (o.kind === 'fail-final') await driver.fail(t, { code: 'final', attempt: t.attempt }, false);
    if (o.kind === 'unknown') await driver.reportUnknown(t);
  }
  const { rows } = await admin.query<Canonical>(
    `select o.status::text as status, o.result::text as "resultText", o.settled_attempt as "settledAttempt", o.error::text as error,
            (select count(*)::int from settle.attempts a where a.tenant = o.tenant and a.key = o.key and a.settled) as "settledRows"
       from settle_private.operations o where tenant = $1 and key = $2`,
    [TENANT, key],
  );
  return rows[0]!;
}

function firstSuccess(order: readonly Observation[]): number | null {
  const forgedAt = order.findIndex((x) => x.attempt === 'forged');
  const o = order.find(
    (x, i) => x.kind === 'complete' && x.attempt !== 'forged' && !(x.attempt === 1 && forgedAt >= 0 && forgedAt < i),
  );
  return o === undefined || o.attempt === 'forged' ? null : o.attempt;
}

const story = fc.constantFrom<Story>(
  'success',
  'success-after-unknown',
  'fail-retryable',
  'fail-final',
  'unknown',
  'silent',
);
const scenario = fc
  .record({
    stories: fc.tuple(story, story, story),
    repeats: fc.tuple(fc.integer({ min: 1, max: 2 }), fc.integer({ min: 1, max: 2 }), fc.integer({ min: 1, max: 2 })),
    forged: fc.boolean(),
  })
  .chain((s) => {
    const obs = observationsOf(s.stories, s.repeats, s.forged);
    const perm = fc.shuffledSubarray(obs, { minLength: obs.length, maxLength: obs.length });
    return fc.record({ scenario: fc.constant(s), first: perm, second: perm });
  });

describe('the merge is a lattice join', () => {
  it('two orders of the same observations give the prescribed canonical state', async () => {
    const property = fc.asyncProperty(scenario, async ({ scenario: s, first, second }) => {
      figures.runs += 1;
      figures.failedRuns += 1;
      const [a, b] = [await apply(first), await apply(second)];
      const want = expectedStatus(s.stories, s.forged, first);
      for (const [state, order] of [
        [a, first],
        [b, second],
      ] as const) {
        expect(state.status).toBe(expectedStatus(s.stories, s.forged, order));
        const winner = firstSuccess(order);
        expect(state.settledAttempt).toBe(winner);
        expect(state.settledRows).toBe(winner === null ? 0 : 1);
        if (winner !== null)
          expect(canonicalJson(JSON.parse(state.resultText ?? 'null'))).toBe(canonicalJson(resultOf(winner)));
      }
      if (firstSuccess(first) === firstSuccess(second)) expect(b.resultText).toBe(a.resultText);
      // A late success that lifts `failed` keeps the failure's error column (reported), so
      // the error is part of the compared state only while no success settled.
      if (want !== 'completed' && expectedStatus(s.stories, s.forged, second) === want) expect(b.error).toBe(a.error);
      figures.failedRuns -= 1;
    });
    try {
      await fc.assert(property, {
        numRuns: Number(process.env.RELIABILITY_MERGE_RUNS ?? 40),
        ...(process.env.RELIABILITY_SEED === undefined ? {} : { seed: Number(process.env.RELIABILITY_SEED) }),
      });
    } finally {
      // Runs include fast-check's shrinking runs when a counterexample was found.
      recordFigures({
        scenario: 'merge-properties',
        operations: figures.calls,
        faults: figures.expiries + figures.forged,
        violations: figures.failedRuns,
        details: {
          runs: figures.runs,
          keys,
          observations: figures.observations,
          leaseExpiries: figures.expiries,
          forgedSuccesses: figures.forged,
        },
      });
    }
  }, 180_000);
});
