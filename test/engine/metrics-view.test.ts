import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import pg from 'pg';
import { asRole, binding, useClientTest, uniqueKey } from '../client/helpers.js';

// settle.metrics: one row of gauges, each from a partial index. Every state it counts is
// produced through the API (as the application would), then read as settle_readonly.
const t = useClientTest('metrics_view');
const tenant = 'metrics';
const input = (key: string, extra: Record<string, unknown> = {}) => ({
  tenant,
  key,
  request: { n: 1 },
  binding,
  leaseMs: 60_000,
  ...extra,
});

interface MetricsRow {
  feed_horizon_age_seconds?: number;
  feed_horizon_xid_age?: string;
  feed_horizon_held_by_consumer?: string;
  operations_in_flight: string;
  lapsed_leases: string;
  operations_unknown: string;
  oldest_unknown_age_seconds: number;
  operations_conflict: string;
  dead_letters_failed: string;
  dead_letters_needs_reconciliation: string;
  oldest_dead_letter_age_seconds: number;
  conflicts_recent: string;
  refused_observations_recent: string;
  recent_window_seconds: number;
  reconciliation_leased: string;
  oldest_needs_reconciliation_age_seconds: number;
  resolutions_recent: string;
  upkeep_jobs_overdue: string;
  upkeep_jobs_failing: string;
  in_doubt_under_5m: string;
  in_doubt_5m_to_1h: string;
  in_doubt_over_1h: string;
}

/** `url` authenticated as the login role `name` (trust auth in the test cluster). */
function asLogin(url: string, name: string): string {
  const parsed = new URL(url);
  parsed.username = name;
  parsed.password = '';
  return parsed.toString();
}

async function readMetrics(role = 'settle_readonly'): Promise<MetricsRow> {
  const reader = new pg.Client({ connectionString: asRole(t.db.url, role) });
  await reader.connect();
  try {
    const { rows } = await reader.query<MetricsRow>('select * from settle.metrics');
    expect(rows).toHaveLength(1);
    return rows[0] as MetricsRow;
  } finally {
    await reader.end();
  }
}

describe('settle.metrics', () => {
  it('is all zeros on an empty database', async () => {
    // Upkeep that never ran turns overdue a few minutes after the migration: run it once.
    await t.su.query('select * from settle.run_upkeep()');
    // The feed's horizon is cluster-wide: other test files' transactions may hold it.
    const { feed_horizon_age_seconds, feed_horizon_xid_age, feed_horizon_held_by_consumer, ...rest } =
      await readMetrics();
    expect(typeof feed_horizon_age_seconds).toBe('number');
    expect(feed_horizon_xid_age).toMatch(/^\d+$/);
    expect(feed_horizon_held_by_consumer).toBe('0');
    expect(rest).toEqual({
      operations_in_flight: '0',
      lapsed_leases: '0',
      operations_unknown: '0',
      oldest_unknown_age_seconds: 0,
      operations_conflict: '0',
      dead_letters_failed: '0',
      dead_letters_needs_reconciliation: '0',
      oldest_dead_letter_age_seconds: 0,
      conflicts_recent: '0',
      refused_observations_recent: '0',
      recent_window_seconds: 300,
      feed_consumers: '0',
      feed_lag_events: '0',
      feed_lag_seconds: 0,
      feed_events_retained: '0',
      reconciliation_leased: '0',
      oldest_needs_reconciliation_age_seconds: 0,
      resolutions_recent: '0',
      upkeep_jobs_overdue: '0',
      upkeep_jobs_failing: '0',
      in_doubt_under_5m: '0',
      in_doubt_5m_to_1h: '0',
      in_doubt_over_1h: '0',
    });
  });

  it('counts leases, unknown, conflict, dead letters and recent refusals as the API produced them', async () => {
    // Two attempts running, one whose lease lapsed.
    for (const key of [uniqueKey(), uniqueKey()])
      expect(await t.app.claim(input(key))).toMatchObject({ outcome: 'acquired' });
    const lapsed = uniqueKey();
    await t.app.claim(input(lapsed));
    await expireLease(t.su, tenant, lapsed);

    // One unknown, last touched 100 s ago.
    const unknown = uniqueKey();
    const u = await t.app.claim(input(unknown));
    if (u.outcome !== 'acquired') throw new Error('expected acquired');
    expect(await t.app.reportUnknown(u.attempt)).toMatchObject({ outcome: 'recorded' });
    await t.su.query(
      "update settle_private.operations set updated_at = now() - interval '100 seconds' where tenant = $1 and key = $2",
      [tenant, unknown],
    );

    // One dead letter: its only attempt failed.
    const dead = uniqueKey();
    const d = await t.app.claim(input(dead, { maxAttempts: 1 }));
    if (d.outcome !== 'acquired') throw new Error('expected acquired');
    expect(await t.app.fail(d.attempt, { code: 'declined' })).toMatchObject({
      outcome: 'settled',
      reason: 'attempts_exhausted',
    });

    // A success reported under another binding: status conflict, a conflict and a refused observation.
    const conflicted = uniqueKey();
    const c = await t.app.claim(input(conflicted));
    if (c.outcome !== 'acquired') throw new Error('expected acquired');
    const { rows } = await t.su.query<{ outcome: string }>(
      `select outcome from settle.complete(tenant => $1, key => $2, attempt => $3, lease_token => $4, fingerprint => $5,
         principal => 'mallory', scopes => $6, binding_generation => $7, result => '"x"')`,
      [
        tenant,
        conflicted,
        c.attempt.attempt,
        c.attempt.leaseToken,
        c.attempt.fingerprint,
        c.attempt.binding.scopes,
        c.attempt.binding.generation.toString(),
      ],
    );
    expect(rows[0]?.outcome).toBe('conflict');
    // A claim under a used key with another request: a conflict, not an observation.
    expect(await t.app.claim(input(dead, { request: { n: 2 } }))).toMatchObject({ outcome: 'conflict' });
    // A report with a token that is not the attempt's: fenced, a refused observation.
    const fenced = await t.app.complete({ ...u.attempt, leaseToken: '00000000-0000-4000-8000-000000000000' }, 'late');
    expect(fenced).toMatchObject({ outcome: 'fenced', reason: 'invalid_token' });

    const m = await readMetrics();
    expect(m).toMatchObject({
      operations_in_flight: '2',
      lapsed_leases: '1',
      operations_unknown: '1',
      operations_conflict: '1',
      dead_letters_failed: '1',
      dead_letters_needs_reconciliation: '0',
      conflicts_recent: '2',
      refused_observations_recent: '2',
      // The unknown one (100 s) and the conflicted one are in doubt, neither dead-lettered yet.
      in_doubt_under_5m: '2',
      in_doubt_5m_to_1h: '0',
      in_doubt_over_1h: '0',
    });
    expect(m.oldest_unknown_age_seconds).toBeGreaterThanOrEqual(100);
    expect(m.oldest_unknown_age_seconds).toBeLessThan(160);
    expect(m.oldest_dead_letter_age_seconds).toBeGreaterThanOrEqual(0);
    expect(m.oldest_dead_letter_age_seconds).toBeLessThan(60);
    // settle_admin reads it too; the application role does not.
    expect(await readMetrics('settle_admin')).toMatchObject({ operations_in_flight: '2' });
    await expect(readMetrics('settle_app')).rejects.toMatchObject({ code: '42501' });
  });

  it('counts the reconciliation backlog, the reconcilers at work, recent resolutions and upkeep that does not run', async () => {
    const before = await readMetrics();
    // Three operations needing reconciliation (their only attempt lost its response); the oldest
    // was dead-lettered 200 s ago.
    const keys: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const key = uniqueKey('reconcile');
      const claim = await t.app.claim(input(key, { maxAttempts: 1 }));
      if (claim.outcome !== 'acquired') throw new Error('expected acquired');
      expect(await t.app.reportUnknown(claim.attempt)).toMatchObject({ outcome: 'recorded' });
      keys.push(key);
    }
    await t.su.query(
      "update settle_private.operations set dead_lettered_at = now() - interval '200 seconds' where tenant = $1 and key = $2",
      [tenant, keys[0]],
    );
    // A reconciler resolves one and holds a lease on another (as settle_reconciler).
    const reconciler = new pg.Client({ connectionString: asRole(t.db.url, 'settle_reconciler') });
    await reconciler.connect();
    try {
      const resolved = await reconciler.query(
        `select r.outcome from settle.inspect(tenant => $1, key => $2) op,
           settle.resolve(tenant => op.tenant, key => op.key, fingerprint => op.fingerprint, expected_attempt => op.attempt, outcome => 'completed',
                          result => '{"charge": "ch_1"}', reason => 'PSP shows ch_1') r`,
        [tenant, keys[1]],
      );
      expect(resolved.rows).toEqual([{ outcome: 'resolved' }]);
      const leased = await reconciler.query(
        `select key from settle.lease_reconciliation(holder => 'r1', lease => interval '5 minutes', batch_size => 1)`,
      );
      expect(leased.rows).toEqual([{ key: keys[0] }]);
    } finally {
      await reconciler.end();
    }
    // Upkeep: one job whose last run failed, one that has not run for a day (backdated as superuser).
    await t.su.query(
      `update settle_private.upkeep_jobs set last_ok = false, last_error = 'canceling statement due to statement timeout' where job = 'purge'`,
    );
    await t.su.query(
      `update settle_private.upkeep_jobs set last_finished_at = now() - interval '1 day' where job = 'expire_leases'`,
    );

    const m = await readMetrics();
    expect(Number(m.dead_letters_needs_reconciliation) - Number(before.dead_letters_needs_reconciliation)).toBe(2);
    expect(m).toMatchObject({
      reconciliation_leased: '1',
      resolutions_recent: '1',
      upkeep_jobs_overdue: '1',
      upkeep_jobs_failing: '1',
    });
    expect(m.oldest_needs_reconciliation_age_seconds).toBeGreaterThanOrEqual(200);
    expect(m.oldest_needs_reconciliation_age_seconds).toBeLessThan(260);
    // A login bound to another tenant counts none of this tenant's rows (upkeep is engine-wide).
    const bound = `metrics_bound_${randomUUID().slice(0, 8)}`;
    await t.su.query(`create role ${bound} login in role settle_readonly`);
    try {
      await t.su.query(`select settle.grant_tenant(role => $1, tenant => 'someone-else')`, [bound]);
      const other = new pg.Client({ connectionString: asLogin(t.db.url, bound) });
      await other.connect();
      try {
        const { rows } = await other.query<MetricsRow>('select * from settle.metrics');
        expect(rows[0]).toMatchObject({
          reconciliation_leased: '0',
          resolutions_recent: '0',
          oldest_needs_reconciliation_age_seconds: 0,
          upkeep_jobs_overdue: '1',
        });
      } finally {
        await other.end();
      }
    } finally {
      await t.su.query(`select settle.revoke_tenant(role => $1, tenant => null)`, [bound]);
      await t.su.query(`drop role ${bound}`);
    }
    await t.su.query('select * from settle.run_upkeep(force => true)');
  });

  it('every count is served by an index: no sequential scan of operations or audit_log', async () => {
    // The tables here are tiny, so the planner would rightly pick a sequential scan; forbidding it
    // proves that an index can answer each subquery. docs/observability.md measures 10 million rows.
    await t.su.query('begin');
    try {
      await t.su.query('set local enable_seqscan = off');
      // The view reads settle_private._metrics() (jit = off); its query is what the planner sees.
      const body = await t.su.query<{ prosrc: string; proconfig: string[] }>(
        "select prosrc, proconfig from pg_proc where oid = 'settle_private._metrics()'::regprocedure",
      );
      expect(body.rows[0]?.proconfig).toContain('jit=off');
      const { rows } = await t.su.query<{ 'QUERY PLAN': unknown }>(
        `explain (format json) ${body.rows[0]?.prosrc ?? ''}`,
      );
      const plan = JSON.stringify(rows[0]?.['QUERY PLAN']);
      expect(plan).not.toContain('Seq Scan');
      expect(plan).toContain('operations_by_lease_expiry_idx');
      // unknown, conflict and the dead letters: one partial index (00002).
      expect(plan).toContain('operations_needing_attention_idx');
      expect(plan).toContain('audit_log_refusals_by_at_idx');
      // The reconciliation and upkeep gauges (00014): the same rule.
      const upkeepBody = await t.su.query<{ prosrc: string; proconfig: string[] }>(
        "select prosrc, proconfig from pg_proc where oid = 'settle_private._upkeep_metrics()'::regprocedure",
      );
      expect(upkeepBody.rows[0]?.proconfig).toContain('jit=off');
      const upkeepPlan = await t.su.query<{ 'QUERY PLAN': unknown }>(
        `explain (format json) ${upkeepBody.rows[0]?.prosrc ?? ''}`,
      );
      const scanned = seqScans(upkeepPlan.rows[0]?.['QUERY PLAN']);
      expect(scanned.filter((r) => r === 'operations' || r === 'audit_log')).toEqual([]);
      const text = JSON.stringify(upkeepPlan.rows[0]?.['QUERY PLAN']);
      expect(text).toContain('operations_needing_attention_idx');
      expect(text).toContain('audit_log_resolutions_by_at_idx');
    } finally {
      await t.su.query('rollback');
    }
  });
});

/** The relations a plan (EXPLAIN FORMAT JSON) reads with a sequential scan. */
function seqScans(plan: unknown): string[] {
  const found: string[] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) return node.forEach(walk);
    if (node === null || typeof node !== 'object') return;
    const record = node as Record<string, unknown>;
    if (record['Node Type'] === 'Seq Scan' && typeof record['Relation Name'] === 'string')
      found.push(record['Relation Name']);
    Object.values(record).forEach(walk);
  };
  walk(plan);
  return found;
}
