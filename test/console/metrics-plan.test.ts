import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';

// What the console's overview and /live.json read from the engine stays bounded as traffic
// grows: settle.metrics reads no operation sequentially (behind row-level security the planner
// has no statistics of status, and a list of statuses looked like half the table), and a feed
// lane's lag reads at most 1,000 index entries per key slot, however many events wait there.
// Counted with the statement statistics of the reading transaction (pg_stat_xact_*), which
// include what the SECURITY DEFINER functions behind the views read.

const SLOT_EVENTS = 3000;

let db: TestDatabase;
let su: pg.Client;

const SETTLE_BATCH = `
with c as (
  select * from settle.claim_many(tenant => 'traffic', keys => $1::text[],
                                  requests => array_fill('{}'::jsonb, array[cardinality($1::text[])]), principal => 'p'))
select count(*)::int as n
  from settle.complete_many(tenant => 'traffic', keys => (select array_agg(c.key order by c.ordinal) from c),
                            attempts => (select array_agg(c.attempt order by c.ordinal) from c),
                            lease_tokens => (select array_agg(c.lease_token order by c.ordinal) from c),
                            fingerprints => (select array_agg(c.fingerprint order by c.ordinal) from c),
                            principal => 'p', scopes => '{}', binding_generation => 0,
                            results => array_fill('{}'::jsonb, array[cardinality($1::text[])]))`;

/** Sequential scans of each table and index entries read from each index, so far (statistics not yet flushed). */
async function counters(): Promise<{ seqScans: Record<string, number>; tuplesRead: Record<string, number> }> {
  const { rows } = await su.query<{ name: string; kind: string; scans: number; tuples: number }>(
    `select c.relname as name, c.relkind::text as kind, pg_stat_get_xact_numscans(c.oid)::int as scans,
            pg_stat_get_xact_tuples_returned(c.oid)::int as tuples
       from pg_class c where c.relnamespace = 'settle_private'::regnamespace and c.relkind in ('r', 'i')`,
  );
  return {
    seqScans: Object.fromEntries(rows.filter((r) => r.kind === 'r').map((r) => [r.name, r.scans])),
    tuplesRead: Object.fromEntries(rows.filter((r) => r.kind === 'i').map((r) => [r.name, r.tuples])),
  };
}

/**
 * What `read` costs the tables and indexes: the backend's counters before and after it, in one
 * transaction (a backend flushes its counters only between transactions, so what it counts
 * before is still there after, and the difference is the read's).
 */
async function counted(
  read: string,
): Promise<{ seqScans: Record<string, number>; tuplesRead: Record<string, number> }> {
  await su.query('begin');
  try {
    const before = await counters();
    await su.query(read);
    const after = await counters();
    const diff = (a: Record<string, number>, b: Record<string, number>) =>
      Object.fromEntries(Object.entries(a).map(([name, n]) => [name, n - (b[name] ?? 0)]));
    return { seqScans: diff(after.seqScans, before.seqScans), tuplesRead: diff(after.tuplesRead, before.tuplesRead) };
  } finally {
    await su.query('rollback');
  }
}

beforeAll(async () => {
  db = await createTestDatabase('console_metrics_plan');
  su = new pg.Client({ connectionString: db.url });
  await su.connect();
  await su.query(`select settle.register_consumer(name => 'ledger', lanes => 4, start_at => 'earliest')`);
  // Keys of one key slot (0): a backlog of SLOT_EVENTS events the consumer has not acknowledged there.
  const { rows } = await su.query<{ key: string }>(
    `select k as key from (select 'payout-' || i as k from generate_series(1, 400000) i) x
      where (hashtext(k) & 2147483647) % 64 = 0 limit ${SLOT_EVENTS}`,
  );
  const keys = rows.map((r) => r.key);
  for (let at = 0; at < keys.length; at += 1000) await su.query(SETTLE_BATCH, [keys.slice(at, at + 1000)]);
  // And what the dead-letter gauges count: a few dead letters of both reasons.
  await su.query(`
    do $$
    declare c record;
    begin
      for i in 1..5 loop
        select * into c from settle.claim(tenant => 'stuck', key => 'unknown-' || i, request => '{}', principal => 'p',
                                          scopes => '{}', binding_generation => 1, max_attempts => 1);
        perform settle.report_unknown(tenant => 'stuck', key => 'unknown-' || i, attempt => c.attempt, lease_token => c.lease_token,
                                      fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1);
        select * into c from settle.claim(tenant => 'stuck', key => 'dead-' || i, request => '{}', principal => 'p',
                                          scopes => '{}', binding_generation => 1, max_attempts => 1);
        perform settle.fail(tenant => 'stuck', key => 'dead-' || i, attempt => c.attempt, lease_token => c.lease_token,
                            fingerprint => c.fingerprint, principal => 'p', scopes => '{}', binding_generation => 1,
                            error => '{"code": "declined"}', retryable => true);
      end loop;
    end $$`);
  await su.query('analyze settle_private.operations, settle_private.feed_events');
}, 240_000);

afterAll(async () => {
  await su?.end();
  await db?.drop();
});

describe("the engine's reads behind the console, as traffic grows", () => {
  it('settle.metrics reads no operation sequentially, and counts the dead letters', async () => {
    const { seqScans } = await counted('select * from settle.metrics');
    expect(seqScans.operations).toBe(0);
    const [row] = (await su.query('select * from settle.metrics')).rows;
    expect(row).toMatchObject({
      dead_letters_failed: '5',
      dead_letters_needs_reconciliation: '5',
      // Every final outcome is an event: the settled traffic and the failed dead letters.
      feed_events_retained: String(SLOT_EVENTS + 5),
    });
    expect(Number(row.oldest_needs_reconciliation_age_seconds)).toBeGreaterThan(0);
  });

  it("a lane's lag reads at most 1,000 entries of a key slot, however many wait there", async () => {
    // 1,000 of slot 0's backlog, and the events of the five failed dead letters in their slots.
    const bound = 1000 + 5;
    const { tuplesRead } = await counted('select * from settle.feed_consumers');
    expect(tuplesRead.feed_events_by_slot_idx).toBeLessThanOrEqual(bound);
    const { rows } = await su.query<{ lane: number; lag_events: string }>(
      `select lane, lag_events from settle.feed_consumers where consumer = 'ledger' order by lane`,
    );
    expect(Number(rows[0]?.lag_events)).toBeGreaterThanOrEqual(1000);
    expect(rows.map((r) => Number(r.lag_events)).reduce((a, b) => a + b, 0)).toBe(1000 + 5);
    // settle.metrics reads the lanes the same way.
    const metrics = await counted('select * from settle.metrics');
    expect(metrics.tuplesRead.feed_events_by_slot_idx).toBeLessThanOrEqual(bound);
  });
});
