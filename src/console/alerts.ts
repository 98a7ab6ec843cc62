// The alerts of docs/observability.md (deploy/prometheus/pg-settle.rules.yml: test/console/
// alerts.test.ts keeps this table equal to that file) that read the SQL gauges (settle.metrics),
// evaluated on the current row. A rule's `for:` and rate windows need the history Prometheus
// keeps: the page shows whether the condition holds now, and names the rules it cannot judge
// (client metrics, deltas). `condition` is the rule's expression as the file writes it.

export interface AlertState {
  readonly name: string;
  readonly severity: 'page' | 'ticket';
  readonly condition: string;
  /** The gauge's current value; null when the rule needs history or client metrics. */
  readonly value: number | null;
  readonly firing: boolean | null;
  readonly runbook: string | null;
}

export interface Rule {
  readonly name: string;
  readonly severity: 'page' | 'ticket';
  readonly column: string | null;
  readonly threshold: number;
  readonly condition: string;
  readonly runbook: string | null;
}

export const SQL_RULES: readonly Rule[] = [
  {
    name: 'PgSettleDeadLettersGrowing',
    severity: 'ticket',
    column: null,
    threshold: 0,
    condition: 'delta(pg_settle_dead_letters{reason="failed"}[30m]) > 0',
    runbook: 'docs/operations.md#dead-letters-piling-up',
  },
  {
    name: 'PgSettleNeedsReconciliation',
    severity: 'page',
    column: 'dead_letters_needs_reconciliation',
    threshold: 0,
    condition: 'pg_settle_dead_letters{reason="needs_reconciliation"} > 0',
    runbook: 'docs/operations.md#needs-reconciliation',
  },
  {
    name: 'PgSettleReconciliationBacklogGrowing',
    severity: 'page',
    column: null,
    threshold: 0,
    condition: 'deriv(pg_settle_dead_letters{reason="needs_reconciliation"}[30m]) > 0 for 30m',
    runbook: 'docs/operations.md#needs-reconciliation',
  },
  {
    name: 'PgSettleReconciliationStalled',
    severity: 'ticket',
    column: 'oldest_needs_reconciliation_age_seconds',
    threshold: 3600,
    condition: 'pg_settle_oldest_needs_reconciliation_age_seconds > 3600',
    runbook: 'docs/operations.md#needs-reconciliation',
  },
  {
    name: 'PgSettleUpkeepOverdue',
    severity: 'ticket',
    column: 'upkeep_jobs_overdue',
    threshold: 0,
    condition: 'pg_settle_upkeep_jobs_overdue > 0 for 5m',
    runbook: 'docs/operations.md#upkeep',
  },
  {
    name: 'PgSettleUpkeepFailing',
    severity: 'ticket',
    column: 'upkeep_jobs_failing',
    threshold: 0,
    condition: 'pg_settle_upkeep_jobs_failing > 0 for 15m',
    runbook: 'docs/operations.md#upkeep',
  },
  {
    name: 'PgSettleLapsedLeases',
    severity: 'ticket',
    column: 'lapsed_leases',
    threshold: 0,
    condition: 'min_over_time(pg_settle_lapsed_leases[10m]) > 0',
    runbook: 'docs/operations.md#operations-stuck-in_progress',
  },
  {
    name: 'PgSettleInDoubtNotDeadLettered',
    severity: 'ticket',
    column: 'in_doubt_over_1h',
    threshold: 0,
    condition: 'pg_settle_in_doubt_operations{age="over_1h"} > 0 for 15m',
    runbook: 'docs/operations.md#upkeep',
  },
  {
    name: 'PgSettleOldUnknown',
    severity: 'ticket',
    column: 'oldest_unknown_age_seconds',
    threshold: 900,
    condition: 'pg_settle_oldest_unknown_age_seconds > 900 for 5m',
    runbook: null,
  },
  {
    name: 'PgSettleConflictStatus',
    severity: 'page',
    column: 'operations_conflict',
    threshold: 0,
    condition: 'pg_settle_operations_conflict > 0',
    runbook: 'docs/operations.md#a-spike-of-conflict',
  },
  {
    name: 'PgSettleConflictRate',
    severity: 'ticket',
    column: 'conflicts_recent',
    threshold: 10,
    condition: 'pg_settle_recent_conflicts > 10 for 10m',
    runbook: 'docs/operations.md#a-spike-of-conflict',
  },
  {
    name: 'PgSettleFeedLag',
    severity: 'page',
    column: 'feed_lag_seconds',
    threshold: 300,
    condition: 'pg_settle_feed_lag_seconds > 300 for 5m',
    runbook: 'docs/feed.md#when-the-feed-stands-still',
  },
  {
    name: 'PgSettleFeedHorizonHeld',
    severity: 'ticket',
    column: 'feed_horizon_age_seconds',
    threshold: 60,
    condition: 'pg_settle_feed_horizon_age_seconds > 60 for 2m',
    runbook: 'docs/feed.md#when-the-feed-stands-still',
  },
  {
    name: 'PgSettleFeedRetained',
    severity: 'ticket',
    column: 'feed_events_retained',
    threshold: 500000,
    condition: 'pg_settle_feed_events_retained > 500000 for 30m',
    runbook: 'docs/feed.md#retention',
  },
];

/** The rules that read client metrics (an application's exporter): not visible from the database. */
export const CLIENT_RULES = [
  'PgSettleLateResults',
  'PgSettleSlowCalls',
  'PgSettleRetryStorm',
  'PgSettleUnknownOutcomes',
] as const;

/** Every SQL-gauge rule, judged on `metrics` (null: the login may not read settle.metrics). */
export function evaluateAlerts(metrics: Readonly<Record<string, unknown>> | null): AlertState[] {
  return SQL_RULES.map((rule) => {
    const raw = rule.column === null || metrics === null ? undefined : metrics[rule.column];
    const value = raw === undefined || raw === null ? null : Number(raw);
    return {
      name: rule.name,
      severity: rule.severity,
      condition: rule.condition,
      value,
      firing: value === null || Number.isNaN(value) ? null : value > rule.threshold,
      runbook: rule.runbook,
    };
  });
}
