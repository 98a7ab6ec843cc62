-- 00010: the read-only views for DBAs and settle.get.
--
-- Why: tables are not an interface (they live in settle_private); what operators and support
-- staff may read is these views, granted to settle_readonly and settle_admin. No view shows a
-- lease token, nor reads one: "a lease is held" is `lease_expires_at is not null` (row rule
-- lease_token_iff_lease_expiry), so that on Citus, where a view's shard queries run as the
-- caller, the readers' column grants can leave lease_token out (sql/citus/distribute.sql).
-- settle.get is the one read granted to settle_app.

set local role settle_owner;

create view settle.operations as
select o.tenant, o.key, o.status, settle.status_rank(o.status) as status_rank, o.attempt, o.max_attempts,
       coalesce(o.lease_expires_at > clock_timestamp(), false) as in_flight,
       o.lease_expires_at, o.result, o.settled_attempt, o.settled_at, o.error, o.dead_lettered_at,
       o.redrive_count, o.fingerprint, o.principal, o.scopes, o.binding_generation, o.request,
       o.created_at, o.updated_at
  from settle_private.operations o;
comment on view settle.operations is
  'Canonical record of every operation (read-only). in_flight: a lease is held and has not lapsed by the database clock. The lease token itself is never shown.';

-- get(tenant, key) -> the canonical record, or no row
-- PL/pgSQL, not SQL: Citus cannot plan a delegated SQL-language function that reads a
-- distributed table with its parameters ("could not create distributed plan").
create function settle.get(tenant text, key text)
returns setof settle.operations
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  return query select * from settle.operations v where v.tenant = get.tenant and v.key = get.key;
end
$$;

comment on function settle.get(text, text) is
  'The canonical record of one operation, for support staff, DBAs and clients that re-read after a lost response.
Parameters: tenant, key.
Outcomes: one row of settle.operations, or no row when the operation does not exist (or was purged). Another tenant''s operation is never visible under your tenant.
SQLSTATEs: none. Locking: none (a snapshot read). Idempotency: read-only.';

create view settle.attempts as
select a.tenant, a.key, a.attempt, a.worker, a.claimed_at, a.ended_at, a.end_reason, a.observation,
       a.observed_at, a.retryable, a.error, a.late_result, a.settled
  from settle_private.attempts a;
comment on view settle.attempts is
  'Every attempt epoch with its attempt-scoped settlement: observation (unknown/conflict/failed/completed), whether it was THE settlement (settled), and any late success (late_result). Lease tokens are never shown.';

create view settle.audit_log as
select l.tenant, l.key, l.audit_id, l.at, l.event::text as event, l.outcome, l.attempt, l.status_before, l.status_after,
       l.actor, l.detail
  from settle_private.audit_log l;
comment on view settle.audit_log is
  'Append-only audit trail: one row per claim (except the read-only answers replay and in_progress, which write nothing), fenced heartbeat, observation, expiry, redrive and purge, ordered per key by audit_id. Transitions are serialized by the operation row lock, so their rows are in commit order; claims answered without a change (conflict, failed) take no row lock and may interleave with a concurrent transition.';

create view settle.dead_letters as
select o.tenant, o.key, o.attempt, o.max_attempts, o.error, o.dead_lettered_at, o.redrive_count,
       o.created_at, o.updated_at
  from settle_private.operations o
 where o.status = 'failed' and o.dead_lettered_at is not null;
comment on view settle.dead_letters is
  'Operations that spent their attempt budget without a settled outcome. Inspect, then settle.redrive or leave for settle.purge.';

create view settle.settlements as
select o.tenant, o.key, o.settled_attempt as attempt, o.result, o.settled_at
  from settle_private.operations o
 where o.status = 'completed';
comment on view settle.settlements is
  'Exactly one row per completed operation: the final settlement, written in the same transaction as the move to completed.';

create view settle.stats as
select o.tenant,
       count(*) as operations,
       count(*) filter (where o.status = 'pending') as pending,
       count(*) filter (where o.status = 'running') as running,
       count(*) filter (where o.status = 'unknown') as unknown,
       count(*) filter (where o.status = 'conflict') as conflict,
       count(*) filter (where o.status = 'failed') as failed,
       count(*) filter (where o.status = 'completed') as completed,
       count(*) filter (where o.dead_lettered_at is not null) as dead_lettered,
       count(*) filter (where o.lease_expires_at > clock_timestamp()) as in_flight,
       count(*) filter (where o.lease_expires_at <= clock_timestamp()) as lapsed_leases,
       coalesce(sum(o.attempt), 0) as attempts
  from settle_private.operations o
 group by o.tenant;
comment on view settle.stats is
  'Per-tenant counts by status, dead letters, live and lapsed leases, and attempts opened.';

-- One row of gauges for monitoring systems (sql_exporter: deploy/sql_exporter/). Every count
-- reads a partial index that holds only the rows it counts (leases, unknown/conflict, dead
-- letters, audit refusals), never a scan of all operations: settle.stats is the per-tenant
-- census, this is what a scraper polls every 15-60 s. Measured at 10 million operations in
-- docs/observability.md.
create view settle.metrics as
select (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at > w.now) as operations_in_flight,
       (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at <= w.now) as lapsed_leases,
       (select count(*) from settle_private.operations o where o.status = 'unknown') as operations_unknown,
       coalesce((select extract(epoch from w.now - min(o.updated_at))::float8
                   from settle_private.operations o where o.status = 'unknown'), 0) as oldest_unknown_age_seconds,
       (select count(*) from settle_private.operations o where o.status = 'conflict') as operations_conflict,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status = 'failed') as dead_letters_failed,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status <> 'failed') as dead_letters_needs_reconciliation,
       coalesce((select extract(epoch from w.now - min(o.dead_lettered_at))::float8
                   from settle_private.operations o where o.dead_lettered_at is not null), 0) as oldest_dead_letter_age_seconds,
       (select count(*) from settle_private.audit_log a
         where a.outcome = 'conflict' and a.at > w.now - w.recent) as conflicts_recent,
       (select count(*) from settle_private.audit_log a
         where a.outcome in ('conflict', 'fenced') and a.at > w.now - w.recent
           and a.event in ('complete', 'fail', 'report_unknown')) as refused_observations_recent,
       extract(epoch from w.recent)::integer as recent_window_seconds
  from (select clock_timestamp() as now, interval '5 minutes' as recent) w;
comment on view settle.metrics is
  'Gauges for monitoring, one row, each read from a partial index (cheap at any table size): live leases (operations_in_flight), leases past expiry not yet taken over or swept (lapsed_leases), unknown operations and the age in seconds of the least recently touched one, operations in conflict, dead letters by reason (failed: every attempt failed; needs_reconciliation: an attempt may have taken effect) and the oldest dead letter''s age, and in the last recent_window_seconds (300): conflicts (claims and observations refused for a different request or binding) and refused observations (complete, fail, report_unknown answered fenced or conflict).';

reset role;
