import type { Replacement } from './mutants.js';

/**
 * The feed's fixes reverted, for test/reliability/model-mutants.test.ts: each must be caught by
 * the random model-based sequences alone (as many as CI runs), not only by a scripted case.
 */
export interface FeedModelMutant {
  readonly name: string;
  readonly defect: string;
  readonly replacements: readonly Replacement[];
  /** At most this many random sequences must catch it (with room: the seed is random in CI). */
  readonly randomRuns: number;
}

export const FEED_MODEL_MUTANTS: readonly FeedModelMutant[] = [
  {
    name: 'feed-reset-above-horizon',
    defect:
      'reset_consumer places a lane just before the first committed event at or after its time, above a transaction still running',
    replacements: [
      {
        file: '00013_feed.sql',
        find: `    if not found or (v_xid, v_id) > (v_horizon, 0::bigint) then`,
        replace: `    if not found then`,
      },
    ],
    // Measured: caught by random sequence 1-8 (seeds 11-66); the hunt stops at the first catch.
    randomRuns: 100,
  },
  {
    name: 'reconciler-views-denied',
    defect: 'settle_reconciler may select its views but not execute the tenant filter they call (42501)',
    replacements: [
      {
        file: '00015_grants.sql',
        find: `grant execute on function settle_private._visible_tenants() to settle_readonly, settle_admin, settle_reconciler;`,
        replace: `grant execute on function settle_private._visible_tenants() to settle_readonly, settle_admin;`,
      },
    ],
    randomRuns: 25,
  },
];
