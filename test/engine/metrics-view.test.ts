import { describe, expect, it } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import pg from 'pg';
import { asRole, binding, useClientTest, uniqueKey } from '../client/helpers.js';

// settle.metrics: one row of gauges, each from a partial index. Every state it counts is
// produced through the API (as the application would), then read as settle_readonly.
const t = useClientTest('metrics_view');
const tenant = 'metrics';
const input = (key: string, extra: Record<string, unknown> = {}) => ({ tenant, key, request: { n: 1 }, binding, leaseMs: 60_000, ...extra });

interface MetricsRow {
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
    expect(await readMetrics()).toEqual({
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
    });
  });

  it('counts leases, unknown, conflict, dead letters and recent refusals as the API produced them', async () => {
    // Two attempts running, one whose lease lapsed.
    for (const key of [uniqueKey(), uniqueKey()]) expect(await t.app.claim(input(key))).toMatchObject({ outcome: 'acquired' });
    const lapsed = uniqueKey();
    await t.app.claim(input(lapsed));
    await expireLease(t.su, tenant, lapsed);

    // One unknown, last touched 100 s ago.
    const unknown = uniqueKey();
    const u = await t.app.claim(input(unknown));
    if (u.outcome !== 'acquired') throw new Error('expected acquired');
    expect(await t.app.reportUnknown(u.attempt)).toMatchObject({ outcome: 'recorded' });
    await t.su.query("update settle_private.operations set updated_at = now() - interval '100 seconds' where tenant = $1 and key = $2", [tenant, unknown]);

    // One dead letter: its only attempt failed.
    const dead = uniqueKey();
    const d = await t.app.claim(input(dead, { maxAttempts: 1 }));
    if (d.outcome !== 'acquired') throw new Error('expected acquired');
    expect(await t.app.fail(d.attempt, { code: 'declined' })).toMatchObject({ outcome: 'settled', reason: 'attempts_exhausted' });

    // A success reported under another binding: status conflict, a conflict and a refused observation.
    const conflicted = uniqueKey();
    const c = await t.app.claim(input(conflicted));
    if (c.outcome !== 'acquired') throw new Error('expected acquired');
    const { rows } = await t.su.query<{ outcome: string }>(
      `select outcome from settle.complete(tenant => $1, key => $2, attempt => $3, lease_token => $4, fingerprint => $5,
         principal => 'mallory', scopes => $6, binding_generation => $7, result => '"x"')`,
      [tenant, conflicted, c.attempt.attempt, c.attempt.leaseToken, c.attempt.fingerprint, c.attempt.binding.scopes, c.attempt.binding.generation.toString()],
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
    });
    expect(m.oldest_unknown_age_seconds).toBeGreaterThanOrEqual(100);
    expect(m.oldest_unknown_age_seconds).toBeLessThan(160);
    expect(m.oldest_dead_letter_age_seconds).toBeGreaterThanOrEqual(0);
    expect(m.oldest_dead_letter_age_seconds).toBeLessThan(60);
    // settle_admin reads it too; the application role does not.
    expect(await readMetrics('settle_admin')).toMatchObject({ operations_in_flight: '2' });
    await expect(readMetrics('settle_app')).rejects.toMatchObject({ code: '42501' });
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
      const { rows } = await t.su.query<{ 'QUERY PLAN': unknown }>(`explain (format json) ${body.rows[0]?.prosrc ?? ''}`);
      const plan = JSON.stringify(rows[0]?.['QUERY PLAN']);
      expect(plan).not.toContain('Seq Scan');
      expect(plan).toContain('operations_by_lease_expiry_idx');
      expect(plan).toContain('operations_needing_attention_idx');
      expect(plan).toContain('operations_dead_lettered_idx');
      expect(plan).toContain('audit_log_refusals_by_at_idx');
    } finally {
      await t.su.query('rollback');
    }
  });
});
