import { describe, expect, it } from 'vitest';
import { uniqueKey, useEngineDatabase } from './support/database.js';

// settle.feed_consumers and settle.metrics stay bounded with a large unread backlog: with
// 50,000 unread events and a 64-lane consumer, the lag is read per key slot through
// feed_events_by_slot_idx (an index range scan from the lane's position, at most 1,000 entries
// per slot), never by scanning the retained feed once per lane. The plan's shape is checked
// (EXPLAIN ANALYZE of the functions' bodies: scan types and rows read), not a duration; the
// scrape's timing against an empty feed is bench/feed-lag.ts.
const db = useEngineDatabase('feed_lag_plan');

const EVENTS = 50_000;

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

describe('feed lag at size', () => {
  it(`${EVENTS} unread events, one 64-lane consumer: index range scans per slot, bounded rows`, async () => {
    const su = await db.connect();
    const name = uniqueKey('backlog');
    await su.query(`select * from settle.register_consumer(name => $1, lanes => 64, start_at => 'earliest')`, [name]);
    await su.query(
      `insert into settle_private.feed_events (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt,
                                               result, redrive_count, occurred_at)
       select 'acme', 'k' || i, pg_current_xact_id(), pg_current_xact_id(), hashtext('k' || i), 'completed', 'running', 1,
              '{}'::jsonb, 0, now() - interval '1 minute'
         from generate_series(1, $1::int) i`,
      [EVENTS],
    );
    await su.query('analyze settle_private.feed_events');

    const lanes = await su.query<{ lane: number; lag_events: string }>(
      'select lane, lag_events from settle.feed_consumers where consumer = $1 order by lane',
      [name],
    );
    expect(lanes.rows).toHaveLength(64);
    const counted = lanes.rows.reduce((n, r) => n + Number(r.lag_events), 0);
    expect(counted, 'every event is counted in its lane (each slot holds fewer than 1,000 here)').toBe(EVENTS);

    // The body, planned with the function's own settings (its SET clauses).
    const fn = (
      await su.query<{ src: string; config: string[] | null }>(
        `select prosrc as src, proconfig as config from pg_proc where oid = 'settle_private._feed_lag()'::regprocedure`,
      )
    ).rows[0];
    await su.query('begin');
    for (const setting of fn?.config ?? []) {
      const [key, value] = setting.split('=');
      await su.query(`select set_config($1, $2, true)`, [key, value]);
    }
    const explained = await su.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(
      `explain (analyze, format json) ${fn?.src as string}`,
    );
    await su.query('rollback');
    const plan = nodes((explained.rows[0]?.['QUERY PLAN'][0] as { Plan: PlanNode }).Plan);
    const onEvents = plan.filter((n) => n['Relation Name'] === 'feed_events');
    expect(onEvents.length).toBeGreaterThan(0);
    for (const n of onEvents) {
      expect(n['Node Type'], 'no sequential scan of the feed').toMatch(/^Index (Only )?Scan$/);
      expect(n['Index Name']).toBe('feed_events_by_slot_idx');
    }
    const read = onEvents.reduce((sum, n) => sum + (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1), 0);
    expect(read, 'each event of the backlog read once (64 slots x at most 1,000)').toBeLessThanOrEqual(
      Math.min(EVENTS, 64 * 1000),
    );

    // settle.metrics reads the lanes once (one call of _feed_lag), whatever the number of gauges.
    const metricsBody = (
      await su.query<{ src: string }>(
        `select prosrc as src from pg_proc where oid = 'settle_private._feed_metrics()'::regprocedure`,
      )
    ).rows[0]?.src as string;
    expect(metricsBody.match(/_feed_lag\(\)/g)).toHaveLength(1);
    const metrics = await su.query<{ feed_lag_events: string }>('select feed_lag_events from settle.metrics');
    expect(Number(metrics.rows[0]?.feed_lag_events)).toBeGreaterThan(0);
  }, 120_000);
});
