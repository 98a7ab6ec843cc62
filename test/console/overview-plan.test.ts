import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateScaleRows } from '../../bench/lib/scale-rows.js';
import { discoverCapabilities } from '../../src/console/capabilities.js';
import { openConsoleDatabase, type ConsoleDatabase } from '../../src/console/database.js';
import { COUNT_CAP, EDGE, OVERVIEW_QUERIES, readOverview } from '../../src/console/overview-data.js';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';

// The overview's reads of the operations stay bounded with a large retry backlog and a busy
// minute: with 60,000 pending operations and 1,000 settled at once, each read is an index range
// (no sequential scan of the operations), reads at most the first COUNT_CAP + 1 of the backlog,
// and the chart reads at most 3 × EDGE operations of a minute. (Behind the views the planner guesses a
// quarter of the table for a status; below about 40,000 operations that guess is under the cap,
// and it reads the whole, small, range instead: the backlog here is large enough to be past it.) The plan's shape is checked (EXPLAIN ANALYZE: scan
// types and rows read), not a duration; the overview's time at a million operations is
// bench/console.ts.

const PENDING = 60_000;
const BURST = 1000;

const SETTLE_BATCH = `
with c as (
  select * from settle.claim_many(tenant => 'burst', keys => $1::text[],
                                  requests => array_fill('{}'::jsonb, array[cardinality($1::text[])]), principal => 'p'))
select count(*)::int as n
  from settle.complete_many(tenant => 'burst', keys => (select array_agg(c.key order by c.ordinal) from c),
                            attempts => (select array_agg(c.attempt order by c.ordinal) from c),
                            lease_tokens => (select array_agg(c.lease_token order by c.ordinal) from c),
                            fingerprints => (select array_agg(c.fingerprint order by c.ordinal) from c),
                            principal => 'p', scopes => '{}', binding_generation => 0,
                            results => array_fill('{}'::jsonb, array[cardinality($1::text[])]))`;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  Plans?: PlanNode[];
}

function nodes(plan: PlanNode): PlanNode[] {
  return [plan, ...(plan.Plans ?? []).flatMap(nodes)];
}

let db: TestDatabase;
let su: pg.Client;
let consoleDb: ConsoleDatabase;

beforeAll(async () => {
  db = await createTestDatabase('console_overview_plan');
  await generateScaleRows(db.url, { rows: PENDING });
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  // What the overview shows besides the backlog: settlements, unknown operations, dead letters of both reasons.
  await su.query(`
    do $$
    declare c record;
    begin
      for i in 1..40 loop
        select * into c from settle.claim(tenant => 'recent', key => 'done-' || i, request => '{}', principal => 'p', scopes => '{}',
                                          binding_generation => 1);
        perform settle.complete(tenant => 'recent', key => 'done-' || i, attempt => c.attempt, lease_token => c.lease_token,
                                fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1, result => '{}');
      end loop;
      for i in 1..7 loop
        select * into c from settle.claim(tenant => 'recent', key => 'unknown-' || i, request => '{}', principal => 'p', scopes => '{}',
                                          binding_generation => 1, max_attempts => 1);
        perform settle.report_unknown(tenant => 'recent', key => 'unknown-' || i, attempt => c.attempt, lease_token => c.lease_token,
                                      fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1);
      end loop;
      for i in 1..5 loop
        select * into c from settle.claim(tenant => 'recent', key => 'dead-' || i, request => '{}', principal => 'p', scopes => '{}',
                                          binding_generation => 1, max_attempts => 1);
        perform settle.fail(tenant => 'recent', key => 'dead-' || i, attempt => c.attempt, lease_token => c.lease_token,
                            fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1,
                            error => '{"code": "declined"}', retryable => true);
      end loop;
    end $$`);
  await su.query(SETTLE_BATCH, [Array.from({ length: BURST }, (_, i) => `burst-${i}`)]);
  await su.query('analyze settle_private.operations');
  await su.query('set jit = off');
  consoleDb = openConsoleDatabase(db.url);
}, 180_000);

afterAll(async () => {
  await consoleDb?.end();
  await su?.end();
  await db?.drop();
});

describe('console overview at size', () => {
  it(`${PENDING} pending operations: every read of the operations is an index range, bounded rows`, async () => {
    const reads = [
      'settled per minute',
      'unknown per minute',
      'waiting',
      'dead letters',
      'oldest needing reconciliation',
    ];
    for (const name of reads) {
      const text = OVERVIEW_QUERIES[name];
      expect(text, name).toBeDefined();
      const explained = await su.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
        `explain (analyze, format json) ${text as string}`,
      );
      const plan = nodes((explained.rows[0]?.['QUERY PLAN'][0] as { Plan: PlanNode }).Plan);
      // Scans of the operations: index scans, and bitmap heap scans with their bitmap index scans.
      const onOperations = plan.filter(
        (n) => n['Relation Name'] === 'operations' || n['Index Name']?.startsWith('operations_'),
      );
      expect(onOperations.length, name).toBeGreaterThan(0);
      for (const n of onOperations) {
        expect(n['Node Type'], `${name}: no sequential scan of the operations`).toMatch(
          /^(Index|Index Only|Bitmap Heap|Bitmap Index) Scan$/,
        );
        if (n['Index Name'] !== undefined)
          expect(n['Index Name'], name).toMatch(/^operations_(needing_attention|terminal_by_age)_idx$/);
      }
      const read = onOperations.reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1), 0);
      // The waiting counts read the first COUNT_CAP + 1 of the backlog and its oldest, never all of it.
      expect(read, `${name}: rows read from the operations`).toBeLessThanOrEqual(COUNT_CAP + 1 + 1 + 200);
      // The chart: at most 3 × EDGE of a minute (the burst may straddle two), never the whole burst.
      if (name === 'settled per minute')
        expect(read, `${name}: rows read from the operations`).toBeLessThanOrEqual(2 * 3 * EDGE);
    }
  }, 120_000);

  it('shows the capped backlog, the unknown operations and the dead letters', async () => {
    const caps = await discoverCapabilities(consoleDb);
    const overview = await readOverview(consoleDb, caps);
    const waiting = Object.fromEntries(overview.waiting.map((w) => [w.status, w.n]));
    expect(waiting).toEqual({ pending: COUNT_CAP + 1, unknown: 7, conflict: 0 });
    const { rows } = await su.query<{ oldest: Date }>(
      `select min(updated_at) as oldest from settle_private.operations where status = 'pending'`,
    );
    expect(overview.waiting.find((w) => w.status === 'pending')?.oldest).toEqual(rows[0]?.oldest);
    expect(Object.fromEntries(overview.deadLetters.map((d) => [d.reason, d.n]))).toEqual({
      attempts_exhausted: 5,
      needs_reconciliation: 7,
    });
    // The busy minute is not counted whole: settle.complete_many stamps its batch with one time,
    // so it shows at least what was read (overview-data.ts, EDGE); never more than was settled.
    const settled = overview.minutes.filter((m) => m.status === 'completed' || m.status === 'failed');
    expect(settled.some((m) => m.kind !== 'exact')).toBe(true);
    const total = settled.reduce((n, m) => n + m.n, 0);
    expect(total).toBeGreaterThanOrEqual(2 * EDGE);
    expect(total).toBeLessThanOrEqual(40 + 5 + BURST);
    expect(overview.oldest).toHaveLength(5);
  }, 60_000);
});
