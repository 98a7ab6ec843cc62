-- 00011: the read-only views for DBAs, settle.get (lock-gated) and settle.inspect.
--
-- Why: tables are not an interface (they live in settle_private); what operators and support
-- staff may read is these views, granted to settle_readonly and settle_admin. No view shows a
-- lease token, nor reads one: "a lease is held" is `lease_expires_at is not null` (row rule
-- lease_token_iff_lease_expiry), so that on Citus, where a view's shard queries run as the
-- caller, the readers' column grants can leave lease_token out (sql/citus/distribute.sql).
-- settle.get is the one read granted to settle_app: it answers the holder of the reservation
-- lock only; settle.inspect is the unrestricted read, for settle_readonly and settle_admin. A
-- login role bound to tenants (00007) sees only their rows in every view, settle.admin_log
-- included, and settle.metrics counts only their rows (settle_private._visible_tenants).

set local role settle_owner;

-- in_flight is judged at the start of the reading statement (statement_timestamp(), stable), not
-- by clock_timestamp(): a volatile function in its columns would keep the planner from merging
-- the view into the query that reads it, and a read ordered and limited through the view (the
-- oldest pending operation, a count capped by LIMIT) would then read every row it filters,
-- a million for a retry backlog, instead of the first ones of an index range.
create view settle.operations as
select o.tenant, o.key, o.status, settle.status_rank(o.status) as status_rank, o.attempt, o.max_attempts,
       coalesce(o.lease_expires_at > statement_timestamp(), false) as in_flight,
       o.lease_expires_at, o.result, o.settled_attempt, o.settled_at, o.error, o.dead_lettered_at,
       o.dead_letter_reason, o.redrive_count, o.fingerprint, o.principal, o.scopes, o.binding_generation, o.request,
       o.created_at, o.updated_at
  from settle_private.operations o
 where (select settle_private._visible_tenants()) is null
    or o.tenant = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.operations is
  'Canonical record of every operation (read-only). in_flight: a lease is held and has not lapsed by the database clock at the start of the reading statement. The lease token itself is never shown.';

create type settle.get_result as (
  outcome text,
  reason text,
  status settle.status,
  attempt integer,
  settled_attempt integer,
  result jsonb,
  error jsonb,
  dead_lettered boolean,
  in_flight boolean,
  conflict_on text[],
  created_at timestamptz
);
comment on type settle.get_result is
  'Answer of settle.get. outcome: found | not_found | conflict | refused. Only found discloses state (status, attempt, settled_attempt, result when completed, error, dead_lettered, in_flight, created_at); a conflict discloses only conflict_on; refused only its reason (binding_revoked).';

-- get(tenant, key, request, principal, scopes, binding_generation) -> found | not_found | conflict | refused
create function settle.get(
  tenant text,
  key text,
  request jsonb,
  principal text,
  scopes text[] default '{}',
  binding_generation bigint default 0)
returns settle.get_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_floor bigint;
  v_fp text;
  v_op settle_private.operations;
  v_diff text[];
  v_res settle.get_result;
begin
  if (settle_private._name_ok(get.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(get.key, settle_private._limit('key_bytes'))
      and settle_private._binding_ok(get.principal, get.scopes, get.binding_generation)
      and settle_private._json_ok(get.request, settle_private._limit('request_bytes'))) is not true then
    perform settle_private._check_operation_key(get.tenant, get.key);
    perform settle_private._check_binding(get.principal, get.scopes, get.binding_generation);
    perform settle_private._check_json(get.request, 'request', settle_private._limit('request_bytes'), 'SE004');
  end if;
  v_floor := settle_private._access(get.tenant, get.principal);
  if v_floor < 0 then
    perform settle_private._refuse_tenant(get.tenant, get.key, 'get');
  end if;
  v_fp := settle_private._fingerprint(get.request);

  if get.binding_generation < v_floor then
    -- A revoked generation reads nothing, from a plain read (it must not wait on
    -- the row); the operation it reserved is converted at the next touch by a caller that may wait.
    select * into v_op from settle_private.operations o where o.tenant = get.tenant and o.key = get.key;
    perform settle_private._audit(get.tenant, get.key, v_now, 'get', 'refused', null, v_op.status, v_op.status, null,
      jsonb_build_object('reason', 'binding_revoked', 'below_generation', v_floor,
        'presented', settle_private._presented(v_fp, get.principal, get.scopes, get.binding_generation, null, null)));
    v_res.outcome := 'refused';
    v_res.reason := 'binding_revoked';
    return v_res;
  end if;

  select * into v_op from settle_private.operations o where o.tenant = get.tenant and o.key = get.key;
  if not found then
    v_res.outcome := 'not_found';
    return v_res;
  end if;

  v_diff := settle_private._lock_diff(v_op, v_fp, get.principal, get.scopes, get.binding_generation);
  if v_diff = array['binding_generation'] and v_op.binding_generation < v_floor then
    -- The same principal, re-authenticated above the floor, reading the operation it reserved
    -- under a revoked generation: the safe path after re-authentication. The operation is
    -- converted under its row lock first, so the answer is final: completed stays completed,
    -- anything else can never complete.
    v_op := settle_private._revoke_touch(get.tenant, get.key, get.principal, v_floor, v_now, null);
    v_res.reason := 'reauthenticated';
  elsif cardinality(v_diff) > 0 then
    perform settle_private._audit(get.tenant, get.key, v_now, 'get', 'conflict', null, v_op.status, v_op.status, null,
      jsonb_build_object('conflict_on', v_diff,
        'presented', settle_private._presented(v_fp, get.principal, get.scopes, get.binding_generation, null, null)));
    v_res.outcome := 'conflict';
    v_res.reason := 'lock_mismatch';
    v_res.conflict_on := settle_private._conflict_on(v_diff);
    return v_res;
  end if;

  v_res.outcome := 'found';
  v_res.status := v_op.status;
  v_res.attempt := v_op.attempt;
  v_res.settled_attempt := v_op.settled_attempt;
  v_res.result := v_op.result;
  v_res.error := v_op.error;
  v_res.dead_lettered := v_op.dead_lettered_at is not null;
  v_res.in_flight := coalesce(v_op.lease_expires_at > v_now, false);
  v_res.created_at := v_op.created_at;
  return v_res;
end
$$;

comment on function settle.get(text, text, jsonb, text, text[], bigint) is
  'The lock-gated read: the canonical state of one operation, for the caller that holds its reservation lock (a client that re-reads after a lost response).
Parameters: tenant, key, request (as claimed), principal, scopes, binding_generation (as claimed; the same limits as settle.claim).
Outcomes: found (the lock matches: status, attempt, settled_attempt, result (completed only), error, dead_lettered, in_flight, created_at; reason reauthenticated when the same principal reads above a revocation floor an operation reserved under a revoked generation, which is first moved to conflict if it was not completed) | not_found (no such operation, or purged) | conflict (request or binding differ: only conflict_on, like a conflicting claim; audited with what was presented) | refused (reason binding_revoked: the presented generation is below the floor of settle.revoke_binding; audited).
SQLSTATEs: SE001-SE004 (arguments), SE013 (tenant not granted to this login role).
Locking: none for found, not_found and conflict (a snapshot read); the operation row (FOR UPDATE) when it is converted after a revocation. Writes an audit row for conflict and refused only (a read-only transaction then raises 25006).
Idempotency: repeatable; reads change nothing except the one-time conversion of a revoked operation.';

-- inspect(tenant, key) -> the whole canonical record, or no row (settle_readonly, settle_admin)
create function settle.inspect(tenant text, key text)
returns setof settle.operations
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  if not settle_private._tenant_ok(inspect.tenant) then
    perform settle_private._refuse_tenant(inspect.tenant, inspect.key, 'inspect');
  end if;
  return query select * from settle.operations v where v.tenant = inspect.tenant and v.key = inspect.key;
end
$$;

comment on function settle.inspect(text, text) is
  'The unrestricted read of one operation for support staff and DBAs: the whole canonical record, including request, principal, scopes, fingerprint and result. Granted to settle_readonly and settle_admin only, never to settle_app.
Parameters: tenant, key.
Outcomes: one row of settle.operations, or no row when the operation does not exist (or was purged).
SQLSTATEs: SE013 (a login role bound to other tenants).
Locking: none (a snapshot read). Idempotency: read-only.';

-- Every attempt of every operation: the records of settle_private.attempts and the current
-- attempt of an operation that has none yet (it has neither ended nor reported: the common
-- case while it runs, and for good when it settles, 00002). The attempt that settled the
-- operation observed completed, with the operation's settlement time: its observation is the
-- operation's settlement, not written on its record.
create view settle.attempts as
select x.tenant, x.key, x.attempt, x.worker, x.claimed_at,
       case when settled then coalesce(x.ended_at, o.settled_at) else x.ended_at end as ended_at,
       case when settled then coalesce(x.end_reason, 'observed') else x.end_reason end as end_reason,
       case when settled then 'completed'::settle.status else x.observation end as observation,
       case when settled then o.settled_at else x.observed_at end as observed_at,
       case when settled then null else x.retryable end as retryable,
       case when settled then null else x.error end as error,
       x.late_result, settled
  from (select a.tenant, a.key, a.attempt, a.worker, a.claimed_at, a.ended_at, a.end_reason, a.observation,
               a.observed_at, a.retryable, a.error, a.late_result
          from settle_private.attempts a
        union all
        select c.tenant, c.key, c.attempt, c.worker, c.claimed_at, null, null, null, null, null, null, null
          from settle_private.operations c
         where not exists (select 1 from settle_private.attempts r
                            where r.tenant = c.tenant and r.key = c.key and r.attempt = c.attempt)) x
  join settle_private.operations o on o.tenant = x.tenant and o.key = x.key
 cross join lateral (select coalesce(o.settled_attempt = x.attempt, false) as settled) s
 where (select settle_private._visible_tenants()) is null
    or x.tenant = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.attempts is
  'Every attempt epoch with its attempt-scoped settlement: observation (unknown/conflict/failed/completed), whether it was THE settlement (settled), and any late success (late_result). Lease tokens are never shown.';

-- The audit rows, and the events logged on the operation and attempt rows instead (the claim
-- that opened an attempt: claim:acquired; the success that settled the operation:
-- complete:settled), in one order per key, (seq, audit_id). A claim is logged on its attempt's
-- record, or on the operation while its attempt is current and has no record yet.
create view settle.audit_log as
select e.tenant, e.key, e.seq, e.audit_id, e.at, e.event, e.outcome, e.attempt, e.status_before, e.status_after,
       e.actor, e.detail, e.login
  from (select l.tenant, l.key, l.seq, l.audit_id, l.at, l.event::text as event, l.outcome, l.attempt, l.status_before,
               l.status_after, l.actor, l.detail, l.login
          from settle_private.audit_log l
        union all
        select a.tenant, a.key, a.claim_seq, a.claim_audit_id, a.claimed_at, 'claim', 'acquired', a.attempt,
               a.claim_status_before, a.claim_status_after, a.worker,
               case when a.claim_status_before is null then '{"reserved": true}'::jsonb end, a.claimed_by
          from settle_private.attempts a
         where a.claim_seq is not null
        union all
        select o.tenant, o.key, o.claim_seq, o.claim_audit_id, o.claimed_at, 'claim', 'acquired', o.attempt,
               o.claim_status_before, o.claim_status_after, o.worker,
               case when o.claim_status_before is null then '{"reserved": true}'::jsonb end, o.claimed_by
          from settle_private.operations o
         where o.claim_seq is not null
           and not exists (select 1 from settle_private.attempts r
                            where r.tenant = o.tenant and r.key = o.key and r.attempt = o.attempt)
        union all
        select o.tenant, o.key, o.settled_seq, o.settled_audit_id, o.settled_at, 'complete', 'settled', o.settled_attempt,
               o.settled_status_before, 'completed'::settle.status,
               case when o.settled_attempt = o.attempt then o.worker
                    else (select r.worker from settle_private.attempts r
                           where r.tenant = o.tenant and r.key = o.key and r.attempt = o.settled_attempt) end,
               jsonb_build_object('reason', o.settled_reason), o.settled_by
          from settle_private.operations o
         where o.settled_seq is not null) e
 where (select settle_private._visible_tenants()) is null
    or e.tenant = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.audit_log is
  'Append-only audit trail: one row per claim (except the read-only answers replay and in_progress, which write nothing), fenced heartbeat, observation, expiry, redrive and purge, ordered per key by (seq, audit_id). The rows claim:acquired and complete:settled come from the operation and attempt rows that log them (claim_* and settled_*), the others from settle_private.audit_log. seq numbers an operation''s events 1, 2, 3 ... without any global sequence (audit_id alone is not an order on Citus). Transitions are serialized by the operation row lock, so their rows are consecutive, in commit order; claims answered without a change (conflict, failed) take no row lock and may interleave with a concurrent transition. actor is what the caller supplied (a claim''s worker) or the admin login; login is always the authenticated login role (session_user) of the call. Of the refused, fenced and conflicting calls, a key keeps the first 20 here in full; the rest are counted in settle.audit_overflow.';

-- Per key, the refused, fenced and conflicting calls beyond the first 20 that settle.audit_log
-- keeps in full (settle_private._audit, 00006).
create view settle.audit_overflow as
select x.tenant, x.key, x.refusals, x.first_at, x.last_at, x.last_event, x.last_outcome, x.last_login, x.last_actor,
       encode(x.digest, 'hex') as digest
  from settle_private.audit_overflow x
 where (select settle_private._visible_tenants()) is null
    or x.tenant = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.audit_overflow is
  'Evidence beyond the bound: per key, the refused, fenced and conflicting calls after the first 20 kept in full in settle.audit_log, counted (refusals), with the first and last time, the last call''s event, outcome, authenticated login and caller-supplied actor, and digest, a SHA-256 chained over each folded row''s detail (sha256(previous || sha256(detail))). Removed with its key by settle.purge.';

create view settle.dead_letters as
select o.tenant, o.key, o.attempt, o.max_attempts, o.error, o.dead_lettered_at, o.redrive_count,
       o.created_at, o.updated_at, o.dead_letter_reason as reason, o.status
  from settle_private.operations o
 where o.dead_lettered_at is not null
   and ((select settle_private._visible_tenants()) is null
    or o.tenant = any ((select settle_private._visible_tenants())::text[]));
comment on view settle.dead_letters is
  'Operations that spent their attempt budget without a settled outcome. reason attempts_exhausted: every attempt recorded a failure (status failed); settle.redrive re-opens it. reason needs_reconciliation: an attempt may have taken effect (status unknown or conflict): check the downstream system first; a matching success still settles it, settle.redrive re-opens it without lowering its status. Neither is purged while dead-lettered.';

create view settle.settlements as
select o.tenant, o.key, o.settled_attempt as attempt, o.result, o.settled_at
  from settle_private.operations o
 where o.status = 'completed'
   and ((select settle_private._visible_tenants()) is null
    or o.tenant = any ((select settle_private._visible_tenants())::text[]));
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
       count(*) filter (where o.dead_letter_reason = 'needs_reconciliation') as needs_reconciliation,
       count(*) filter (where o.lease_expires_at > clock_timestamp()) as in_flight,
       count(*) filter (where o.lease_expires_at <= clock_timestamp()) as lapsed_leases,
       coalesce(sum(o.attempt), 0) as attempts
  from settle_private.operations o
 where (select settle_private._visible_tenants()) is null
    or o.tenant = any ((select settle_private._visible_tenants())::text[])
 group by o.tenant;
comment on view settle.stats is
  'Per-tenant counts by status, dead letters (dead_lettered: all; needs_reconciliation: those where an attempt may have taken effect, counted under unknown or conflict, never under failed), live and lapsed leases, and attempts opened.';

-- One row of gauges for monitoring systems (sql_exporter: deploy/sql_exporter/). Every count
-- reads a partial index that holds only a small set of rows (the leases; the operations
-- waiting for someone, 00002: pending, unknown, conflict, dead letters; the audit refusals),
-- never a scan of all operations: settle.stats is the per-tenant
-- census, this is what a scraper polls every 15-60 s. Measured at 10 million operations in
-- docs/observability.md.
--
-- It answers one row (rows 1): at the default guess of 1,000 rows, the join of the gauge
-- functions in settle.metrics looked like 20 million rows, and JIT compiled the view itself.
-- The query lives in a function only to run it with jit = off: the planner's estimate for the
-- partial indexes grows with the table (a third of 10 million rows for status = 'unknown'), which
-- crossed jit_above_cost and spent ~60 ms compiling a query that reads ~170 index pages in under
-- a millisecond. SECURITY DEFINER like the API: only the owner reads the private tables.
-- A login bound to tenants counts only their rows (w.tenants; NULL for an unbound login, which
-- leaves every partial-index read as it was).
-- The dead-letter gauges name the statuses a dead letter can have (row rule
-- dead_letter_reason_fits_status: failed, or unknown and conflict) rather than `status <>
-- 'failed'`: the index is ordered by status, so they read those ranges only and step over the
-- retry backlog (pending), which can be most of the index. The failed ones are the range
-- [failed, failed], not `status = 'failed'`: row-level security hides the statistics of status
-- from the planner (enum equality is not leakproof), and with an equality it can also prove the
-- predicate of operations_terminal_by_age_idx and read every settled operation there; the range
-- proves only operations_needing_attention_idx, whose failed range holds the dead letters alone.
-- Every dead-letter read names its statuses as a range ([unknown, conflict], [unknown, failed]), not
-- a list: a list looked like half the table to the planner, which then read every operation
-- sequentially once completed operations outnumbered the backlog (test/console/metrics-plan.test.ts).
create function settle_private._metrics()
returns table (operations_in_flight bigint, lapsed_leases bigint, operations_unknown bigint,
               oldest_unknown_age_seconds double precision, operations_conflict bigint,
               dead_letters_failed bigint, dead_letters_needs_reconciliation bigint,
               oldest_dead_letter_age_seconds double precision, conflicts_recent bigint,
               refused_observations_recent bigint, recent_window_seconds integer)
language sql
stable
security definer
rows 1
set search_path = pg_catalog, pg_temp
set jit = off
as $$
select (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at > w.now
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_in_flight,
       (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at <= w.now
           and (w.tenants is null or o.tenant = any (w.tenants))) as lapsed_leases,
       (select count(*) from settle_private.operations o where o.status = 'unknown'
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_unknown,
       coalesce((select extract(epoch from w.now - min(o.updated_at))::float8
                   from settle_private.operations o where o.status = 'unknown'
           and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_unknown_age_seconds,
       (select count(*) from settle_private.operations o where o.status = 'conflict'
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_conflict,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status between 'failed' and 'failed'
           and (w.tenants is null or o.tenant = any (w.tenants))) as dead_letters_failed,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status between 'unknown' and 'conflict'
           and (w.tenants is null or o.tenant = any (w.tenants))) as dead_letters_needs_reconciliation,
       coalesce((select extract(epoch from w.now - min(o.dead_lettered_at))::float8
                   from settle_private.operations o where o.dead_lettered_at is not null
                    and o.status between 'unknown' and 'failed'
                    and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_dead_letter_age_seconds,
       (select count(*) from settle_private.audit_log a
         where a.outcome = 'conflict' and a.at > w.now - w.recent
           and (w.tenants is null or a.tenant = any (w.tenants))) as conflicts_recent,
       (select count(*) from settle_private.audit_log a
         where a.outcome in ('conflict', 'fenced') and a.at > w.now - w.recent
           and a.event in ('complete', 'fail', 'report_unknown')
           and (w.tenants is null or a.tenant = any (w.tenants))) as refused_observations_recent,
       extract(epoch from w.recent)::integer as recent_window_seconds
  from (select clock_timestamp() as now, interval '5 minutes' as recent,
               settle_private._visible_tenants() as tenants) w
$$;
comment on function settle_private._metrics() is
  'The gauges of settle.metrics (one row), run with jit = off. Internal: read settle.metrics.';

create view settle.metrics as
select m.operations_in_flight, m.lapsed_leases, m.operations_unknown, m.oldest_unknown_age_seconds,
       m.operations_conflict, m.dead_letters_failed, m.dead_letters_needs_reconciliation,
       m.oldest_dead_letter_age_seconds, m.conflicts_recent, m.refused_observations_recent,
       m.recent_window_seconds
  from settle_private._metrics() m;
comment on view settle.metrics is
  'Gauges for monitoring, one row, each read from a partial index (cheap at any table size): live leases (operations_in_flight), leases past expiry not yet taken over or swept (lapsed_leases), unknown operations and the age in seconds of the least recently touched one, operations in conflict, dead letters by reason (failed: every attempt failed; needs_reconciliation: an attempt may have taken effect) and the oldest dead letter''s age, and in the last recent_window_seconds (300): conflicts (claims and observations refused for a different request or binding) and refused observations (complete, fail, report_unknown answered fenced or conflict).';

-- A login bound to tenants sees the changes that name one of its tenants (grants and revocations
-- of its tenants, floors of its principals), with the list of a role's tenants cut to its own;
-- engine-wide changes (set_purge_min_retention) and unbindings (revoke_tenant with tenant NULL)
-- name no tenant and are shown to unbound readers only.
create view settle.admin_log as
select l.log_id, l.at, l.event, l.actor,
       case when (select settle_private._visible_tenants()) is null or not (l.detail ? 'tenants') then l.detail
            else l.detail || jsonb_build_object('tenants', (
                   select coalesce(jsonb_agg(t), '[]'::jsonb) from jsonb_array_elements_text(
                     case jsonb_typeof(l.detail->'tenants') when 'array' then l.detail->'tenants' else '[]'::jsonb end) as t
                    where t = any ((select settle_private._visible_tenants())::text[]))) end as detail
  from settle_private.admin_log l
 where (select settle_private._visible_tenants()) is null
    or l.detail->>'tenant' = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.admin_log is
  'Append-only log of changes to access: tenant grants and revocations (settle.grant_tenant, settle.revoke_tenant), binding revocations (settle.revoke_binding) and the minimum retention (settle.set_purge_min_retention), with who made them. A login bound to tenants sees only the changes naming one of its tenants.';

reset role;
