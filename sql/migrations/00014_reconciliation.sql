-- 00014: reconciliation and upkeep: settle.resolve, the reconciler's leases, retention stored in
-- the database and the upkeep jobs that run expiry and purge on a schedule.
--
-- Why: an operation whose attempt may have taken effect is never answered `failed` (00004,
-- 00009): once its budget is spent it stays `unknown` (or `conflict`), dead-lettered
-- needs_reconciliation, and only a matching success of one of its attempts could end it. The
-- worker that held that attempt's token is usually long gone. settle.resolve is the way out:
-- someone who checked the downstream system (an operator, or the application's reconciler)
-- records the verified outcome, with who (session_user), why (a required reason) and the
-- evidence:
--   * `completed` with the result the downstream reports: settled through an attempt epoch of
--     its own (attempt N+1, worker `resolve:<role>`, settled_reason `resolved`), so that every
--     completed operation still has exactly one settled attempt; the budget grows by that one
--     epoch. A live lease of another attempt ends (settled_elsewhere). A late success of any
--     older attempt is then `already_settled, late_success`, as for any settlement;
--   * `failed` with the error: an explicit, audited assertion that no attempt took effect. The
--     lattice guard (the failure guard of _100_guard_lattice, 00004) refuses every move to failed while an attempt
--     may have taken effect; it makes one exception, recognised by the `resolve` audit row this
--     transaction wrote for this key with status_after failed (_resolving_failed, 00004), which
--     only settle.resolve writes. The operator's verdict is also recorded on every attempt that
--     had no terminal observation (null or unknown): failed, not retryable, with an error that
--     names the resolution. So a late success of such an attempt is answered
--     `already_settled, attempt_already_observed` (what it presented is kept in the audit log)
--     and never turns the resolved failure into a second final outcome. A failed resolution is
--     refused while an attempt holds a lease: that attempt may still take effect.
-- A resolution never lowers a status (completed stays absorbing; failed and completed are final
-- for it: it answers already_final and changes nothing), presents the reservation's fingerprint
-- (so a key purged and claimed again in between is not resolved by mistake), and respects the
-- tenant binding of the login role.
-- Evidence has an epoch: what the downstream showed was true of the attempts that existed when
-- it was read. A client that retries after the check opens attempt N+1, which may take effect
-- after it; a verdict read for attempt N must not judge it (nor a status that moved since, e.g.
-- unknown to conflict by a mismatched success). So a resolution presents the attempt its
-- evidence concerns (expected_attempt) and, optionally, the status read with it
-- (expected_status), and is refused (SE053) when the operation moved on: nothing is judged
-- that the one who checked did not see. A final operation answers already_final first, so
-- applying the same resolution twice stays idempotent. The reconciler leases the operations it checks
-- (settle.lease_reconciliation) so that several processes share the work.
--
-- In-doubt operations whose caller gave up: an operation that may have taken effect (unknown,
-- conflict, or pending after a lapsed lease nobody reported on) with budget left is dead-lettered
-- only when an attempt spends the budget. A caller that got a timeout and never retried leaves it
-- so for good: no dead letter, so no reconciler and no `pg-settle dead-letters` sees it, and the
-- feed never delivers it. settle.dead_letter_in_doubt gives it a lifecycle: once no attempt has
-- touched it for in_doubt_after (default 15 minutes, settle.set_in_doubt_after) and no lease is
-- held, it is dead-lettered needs_reconciliation (audited: event expire, outcome dead_lettered,
-- cause in_doubt_abandoned), the state a spent budget leads to, so the reconciler leases it.
--
-- Upkeep: settle.run_upkeep runs what is due of four jobs, expire_leases (default every
-- minute), dead_letter_in_doubt (default every minute), purge (default every hour, retention 7
-- days, never an unresolved operation) and trim_feed (default every minute: settle.trim_feed,
-- never an event a registered consumer has not acknowledged; without it the feed's own copy of
-- every outcome would stay forever), each under
-- its job row's lock taken with SKIP LOCKED: whoever calls it (a pg_cron job, several
-- `pg-settle maintain` loops) one caller runs a job at a time, and a job that ran recently is
-- not run again. settle.upkeep shows when each job last ran and whether it is overdue.

set local role settle_owner;

-- ---------------------------------------------------------------------------------------
-- settle.resolve
-- ---------------------------------------------------------------------------------------

create type settle.resolve_result as (
  outcome text,
  reason text,
  status settle.status,
  status_before settle.status,
  attempt integer,
  settled_attempt integer,
  result jsonb,
  error jsonb
);
comment on type settle.resolve_result is
  'Answer of settle.resolve. outcome: resolved (status_before -> status, the resolution is recorded) | already_final (the operation was completed or failed already; nothing changed; reason matches: the final outcome is the one asserted, or differs). status, attempt, settled_attempt, result and error are the canonical state after the call.';

-- resolve(tenant, key, fingerprint, expected_attempt, outcome, reason, result, error, evidence,
--         expected_status) -> resolved | already_final
create function settle.resolve(
  tenant text,
  key text,
  fingerprint text,
  expected_attempt integer,
  outcome text,
  reason text,
  result jsonb default null,
  error jsonb default null,
  evidence jsonb default null,
  expected_status settle.status default null)
returns settle.resolve_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_writes integer := 0;
  v_op settle_private.operations;
  v_before settle.status;
  v_attempt integer;
  v_seq bigint;
  v_audit_id bigint;
  v_token uuid;
  v_worker text;
  v_open jsonb;
  v_res settle.resolve_result;
  v_detail jsonb;
begin
  perform settle_private._check_operation_key(resolve.tenant, resolve.key);
  if resolve.fingerprint is null or resolve.fingerprint !~ '^v[0-9]+:[0-9a-f]{64}$' then
    perform settle_private._raise('SE004', 'fingerprint must be the reservation''s fingerprint (v<n>:<64 hex>)',
      jsonb_build_object('field', 'fingerprint'), 'Read it from settle.inspect or settle.operations.');
  end if;
  if resolve.expected_attempt is null or resolve.expected_attempt < 1 then
    perform settle_private._raise('SE008', 'expected_attempt is required: the attempt the checked evidence concerns (>= 1)',
      jsonb_build_object('field', 'expected_attempt'), 'Read it with the operation (settle.inspect: attempt) when you check the downstream.');
  end if;
  if resolve.outcome is null or resolve.outcome not in ('completed', 'failed') then
    perform settle_private._raise('SE008', 'outcome must be completed or failed',
      jsonb_build_object('field', 'outcome'), null);
  end if;
  if resolve.reason is null or settle_private._is_blank(resolve.reason)
     or octet_length(resolve.reason) > settle_private._limit('reason_bytes') then
    perform settle_private._raise('SE008', format('reason is required (1-%s bytes): why, and the ticket',
        settle_private._limit('reason_bytes')),
      jsonb_build_object('field', 'reason'), 'Every resolution records why it was made.');
  end if;
  if resolve.outcome = 'completed' then
    perform settle_private._check_json(resolve.result, 'result', settle_private._limit('result_bytes'), 'SE005');
    if resolve.error is not null then
      perform settle_private._raise('SE008', 'a completed resolution takes a result, not an error',
        jsonb_build_object('field', 'error'), null);
    end if;
  else
    perform settle_private._check_json(resolve.error, 'error', settle_private._limit('error_bytes'), 'SE006');
    if resolve.result is not null then
      perform settle_private._raise('SE008', 'a failed resolution takes an error, not a result',
        jsonb_build_object('field', 'result'), null);
    end if;
  end if;
  if resolve.evidence is not null and not settle_private._json_ok(resolve.evidence, settle_private._limit('error_bytes')) then
    perform settle_private._raise('SE008', format('evidence must be at most %s bytes of JSON text', settle_private._limit('error_bytes')),
      jsonb_build_object('field', 'evidence'), 'Keep a reference to large evidence (a ticket, a statement id).');
  end if;
  if not settle_private._tenant_ok(resolve.tenant) then
    perform settle_private._refuse_tenant(resolve.tenant, resolve.key, 'resolve');
  end if;

  v_op := settle_private._lock_operation(resolve.tenant, resolve.key);
  v_before := v_op.status;
  if v_op.fingerprint <> resolve.fingerprint then
    perform settle_private._raise('SE052', 'resolve refused: the fingerprint is not the reservation''s',
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key),
      'The key may have been purged and claimed again: read the operation again (settle.inspect) and check the downstream for that reservation.');
  end if;
  v_detail := jsonb_build_object('asserted', resolve.outcome, 'reason', resolve.reason, 'evidence', resolve.evidence,
    'dead_letter_reason', v_op.dead_letter_reason, 'xact', pg_current_xact_id()::text,
    'expected_attempt', resolve.expected_attempt, 'expected_status', resolve.expected_status);

  if v_op.status in ('completed', 'failed') then
    -- Final already (a late success, or another resolution, came first): nothing changes; the
    -- assertion is kept as evidence.
    v_res.outcome := 'already_final';
    v_res.reason := case
      when v_op.status::text = resolve.outcome
           and (v_op.status = 'failed' or v_op.result = resolve.result) then 'matches'
      else 'differs' end;
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'already_final',
      v_op.attempt, v_before, v_before, session_user::text, v_detail || jsonb_build_object('presented',
        settle_private._presented(resolve.fingerprint, null, null, null,
          case resolve.outcome when 'completed' then 'result' else 'error' end, coalesce(resolve.result, resolve.error))));
    return row(v_res.outcome, v_res.reason, v_op.status, v_before, v_op.attempt, v_op.settled_attempt, v_op.result,
               v_op.error)::settle.resolve_result;
  end if;
  if v_op.attempt <> resolve.expected_attempt
     or (resolve.expected_status is not null and v_op.status <> resolve.expected_status) then
    -- The evidence was read before the operation moved on (a newer attempt, which may have taken
    -- effect after the check; or another status): it cannot judge what it did not see.
    perform settle_private._raise('SE053', format('resolve refused: the operation moved on since the evidence was read (attempt %s, status %s; expected attempt %s%s)',
        v_op.attempt, v_op.status, resolve.expected_attempt,
        case when resolve.expected_status is null then '' else ', status ' || resolve.expected_status end),
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'attempt', v_op.attempt, 'status', v_op.status,
                         'expected_attempt', resolve.expected_attempt, 'expected_status', resolve.expected_status),
      'Read the operation again (settle.inspect), check the downstream again for every attempt up to the current one, and resolve with what you read then.');
  end if;
  if v_op.status not in ('unknown', 'conflict') then
    perform settle_private._raise('SE050', format('only an unknown or conflict operation can be resolved (status %s)', v_op.status),
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'status', v_op.status),
      'A pending or running operation has not lost an outcome yet: let its attempt report, or its lease lapse (settle.expire_leases).');
  end if;
  if resolve.outcome = 'failed' and v_op.lease_token is not null then
    perform settle_private._raise('SE051', 'a failed resolution is refused while an attempt holds a lease',
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'attempt', v_op.attempt,
                         'lease_expires_at', v_op.lease_expires_at),
      'That attempt may still take effect: wait for it to report, or for its lease to lapse and settle.expire_leases to end it.');
  end if;

  if resolve.outcome = 'completed' then
    v_attempt := v_op.attempt + 1;
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'resolved', v_attempt,
      v_before, 'completed', session_user::text, v_detail);
    if v_op.lease_token is not null then
      -- The holder of a live (or lapsed) lease is over: the downstream says the effect happened.
      v_writes := v_writes + settle_private._end_attempt(resolve.tenant, resolve.key, v_op.attempt, v_now, 'settled_elsewhere');
    end if;
    -- The resolution's own attempt epoch (nobody holds its token; no claim log), once the
    -- record of the current attempt is kept, and the settlement through it, in one statement.
    -- (Drawn first: Citus refuses a volatile function in an UPDATE of a distributed table.)
    v_writes := v_writes + settle_private._record_attempt(resolve.tenant, resolve.key, v_op.attempt);
    v_seq := settle_private._next_seq(resolve.tenant, resolve.key);
    v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
    v_token := gen_random_uuid();
    v_worker := 'resolve:' || session_user::text;
    update settle_private.operations o
       set attempt = v_attempt, attempt_token = v_token, worker = v_worker, claimed_at = v_now, claimed_by = session_user,
           claim_seq = null, claim_audit_id = null, claim_status_before = null, claim_status_after = null,
           max_attempts = greatest(o.max_attempts, v_attempt), lease_token = null, lease_expires_at = null,
           status = 'completed', result = resolve.result, settled_attempt = v_attempt, settled_at = v_now,
           settled_seq = v_seq, settled_audit_id = v_audit_id, settled_status_before = v_before,
           settled_reason = 'resolved', settled_by = session_user,
           dead_lettered_at = null, dead_letter_reason = null, error = null, updated_at = v_now
     where o.tenant = resolve.tenant and o.key = resolve.key
    returning * into v_op;
  else
    -- The current attempt's record first (the verdict is written on records).
    v_writes := v_writes + settle_private._record_attempt(resolve.tenant, resolve.key, v_op.attempt);
    -- The verdict on every attempt without a terminal observation, kept in the audit row too.
    select coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt, 'observation', a.observation) order by a.attempt),
                    '[]'::jsonb)
      into v_open
      from settle_private.attempts a
     where a.tenant = resolve.tenant and a.key = resolve.key and (a.observation is null or a.observation = 'unknown');
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'resolved', v_op.attempt,
      v_before, 'failed', session_user::text, v_detail || jsonb_build_object('attempts_judged', v_open));
    update settle_private.attempts a
       set observation = 'failed', observed_at = v_now, retryable = false,
           error = jsonb_build_object('code', 'resolved_failed', 'resolved_by', session_user::text, 'reason', resolve.reason,
                                      'error', resolve.error),
           ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
     where a.tenant = resolve.tenant and a.key = resolve.key and (a.observation is null or a.observation = 'unknown');
    update settle_private.operations o
       set status = 'failed', error = resolve.error, dead_lettered_at = null, dead_letter_reason = null,
           updated_at = v_now
     where o.tenant = resolve.tenant and o.key = resolve.key
    returning * into v_op;
  end if;
  delete from settle_private.reconciliation_leases l where l.tenant = resolve.tenant and l.key = resolve.key;

  return row('resolved', null, v_op.status, v_before, v_op.attempt, v_op.settled_attempt, v_op.result,
             v_op.error)::settle.resolve_result;
end
$$;

comment on function settle.resolve(text, text, text, integer, text, text, jsonb, jsonb, jsonb, settle.status) is
  'Record the verified outcome of an operation that lost it (status unknown or conflict, dead-lettered or not), after checking the downstream system: the way out of needs_reconciliation.
Parameters: tenant, key; fingerprint (the reservation''s, from settle.inspect: a key purged and claimed again is refused); expected_attempt (required: the attempt the checked evidence concerns, read with the operation; a newer attempt is refused); expected_status (optional: the status read with it; another status is refused); outcome completed (with result, <= 1 MiB: what the downstream reports) or failed (with error, <= 64 KiB: an explicit assertion that no attempt took effect); reason (required, 1-1024 bytes: why, the ticket); evidence (optional jsonb, <= 64 KiB).
Outcomes: resolved (completed: settled through an attempt epoch of its own, N+1, worker resolve:<session_user>, settled_reason resolved; a held lease ends settled_elsewhere; failed: every attempt without a terminal observation records the verdict failed (not retryable), so a late success of one is already_settled and never a second final outcome) | already_final (completed or failed already, e.g. a late success came first: nothing changes; reason matches or differs; the assertion is kept in the audit log).
Every call writes one settle.audit_log row (event resolve) with session_user, reason, evidence and the statuses; the dead letter is cleared, so retention applies again.
SQLSTATEs: SE001, SE002, SE004 (fingerprint format), SE005 (result), SE006 (error), SE008 (outcome, reason, evidence, result with failed or error with completed); SE010 not found; SE013 tenant not granted to this login role; SE050 status pending or running; SE051 failed while an attempt holds a lease; SE052 fingerprint is not the reservation''s; SE053 the operation moved on since the evidence was read (its attempt is not expected_attempt, or its status not expected_status).
Locking: the operation row (FOR UPDATE), as every writer: racing a late success or a redrive, exactly one goes first and the other sees its outcome.
Idempotency: a repeat answers already_final (reason matches) and changes nothing but the audit log (already_final is answered before the precondition is compared).';

-- ---------------------------------------------------------------------------------------
-- The reconciler's leases
-- ---------------------------------------------------------------------------------------

-- Which reconciler checks which operation, until when. Not evidence (the resolution is): rows
-- go with the resolution, or are replaced when their lease lapses.
create table settle_private.reconciliation_leases (
  tenant text not null,
  key text not null,
  lease_token uuid not null,
  holder text not null,
  leased_at timestamptz not null,
  expires_at timestamptz not null,
  checks integer not null default 1,
  constraint reconciliation_leases_pkey primary key (tenant, key)
);
comment on table settle_private.reconciliation_leases is
  'Reconciler leases: which process checks which operation needing reconciliation, until when (settle.lease_reconciliation). Private.';
alter table settle_private.reconciliation_leases enable row level security;
alter table settle_private.reconciliation_leases force row level security;
create policy owner_only on settle_private.reconciliation_leases to settle_owner using (true) with check (true);
revoke all on settle_private.reconciliation_leases from public;

create type settle.reconciliation_lease as (
  tenant text,
  key text,
  status settle.status,
  attempt integer,
  fingerprint text,
  request jsonb,
  principal text,
  scopes text[],
  error jsonb,
  dead_letter_reason text,
  dead_lettered_at timestamptz,
  created_at timestamptz,
  lease_token uuid,
  lease_expires_at timestamptz,
  checks integer
);
comment on type settle.reconciliation_lease is
  'A row of settle.lease_reconciliation: an operation needing reconciliation (what the downstream lookup needs: request, fingerprint, principal, error), the reconciler lease on it (lease_token, lease_expires_at) and how many times it was leased (checks).';

-- lease_reconciliation(holder, lease, batch_size) -> operations to check
create function settle.lease_reconciliation(holder text, lease interval default interval '1 minute', batch_size integer default 10)
returns setof settle.reconciliation_lease
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_due record;
  v_token uuid;
  v_checks integer;
  v_op settle_private.operations;
  -- The caller's tenants (NULL: every tenant), read once: a per-row call of _tenant_ok in the
  -- scan would be a query inside a query on each shard on Citus (docs/scale-out.md).
  v_tenants text[] := settle_private._visible_tenants();
begin
  perform settle_private._check_name(holder, 'holder', settle_private._limit('worker_bytes'), 'SE008');
  perform settle_private._check_lease(lease);
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  -- Leases of operations that no longer need reconciliation (settled by a late success) go.
  delete from settle_private.reconciliation_leases l
   where l.expires_at <= v_now
     and not exists (select 1 from settle_private.operations o
                      where o.tenant = l.tenant and o.key = l.key and o.dead_letter_reason = 'needs_reconciliation');
  for v_due in
    select o.tenant, o.key from settle_private.operations o
      left join settle_private.reconciliation_leases l on l.tenant = o.tenant and l.key = o.key
     where o.dead_letter_reason = 'needs_reconciliation' and o.lease_token is null
       and (l.expires_at is null or l.expires_at <= v_now)
       and (v_tenants is null or o.tenant = any (v_tenants))
     order by o.dead_lettered_at, o.tenant, o.key
     limit batch_size
  loop
    -- Taken only if nobody holds a live lease on it now (a concurrent reconciler may have
    -- leased it since the scan): ON CONFLICT sees the latest committed lease.
    v_token := gen_random_uuid();
    v_checks := null;
    insert into settle_private.reconciliation_leases as l (tenant, key, lease_token, holder, leased_at, expires_at)
    values (v_due.tenant, v_due.key, v_token, lease_reconciliation.holder, v_now, v_now + lease_reconciliation.lease)
    on conflict on constraint reconciliation_leases_pkey do update
      set lease_token = excluded.lease_token, holder = excluded.holder, leased_at = excluded.leased_at,
          expires_at = excluded.expires_at, checks = l.checks + 1
      where l.expires_at <= v_now
    returning l.checks into v_checks;
    continue when v_checks is null;
    select * into v_op from settle_private.operations o where o.tenant = v_due.tenant and o.key = v_due.key;
    return next row(v_op.tenant, v_op.key, v_op.status, v_op.attempt, v_op.fingerprint, v_op.request, v_op.principal,
      v_op.scopes, v_op.error, v_op.dead_letter_reason, v_op.dead_lettered_at, v_op.created_at, v_token,
      v_now + lease_reconciliation.lease, v_checks)::settle.reconciliation_lease;
  end loop;
end
$$;

comment on function settle.lease_reconciliation(text, interval, integer) is
  'Lease up to batch_size operations needing reconciliation (dead-lettered needs_reconciliation, no attempt lease held) that no reconciler holds a live lease on, oldest dead letter first, for the caller to check downstream and settle with settle.resolve.
Parameters: holder (the reconciler process, 1-128 bytes); lease (1 second - 1 day, default 1 minute: while it runs no other reconciler leases the operation; an operation left undecided is leased again after it); batch_size (1-100000, default 10).
Outcomes: the leased operations with what a downstream lookup needs (request, fingerprint, principal, error), lease_token, lease_expires_at and checks (how many times it was leased). Only tenants the login role may reach.
SQLSTATEs: SE007 (lease), SE008 (holder, batch_size).
Locking: no operation row lock; each lease row is taken with INSERT ... ON CONFLICT, so concurrent reconcilers never hold a live lease on the same operation. Idempotency: each call takes new leases.';

-- release_reconciliation(tenant, key, lease_token, retry_after) -> released
create function settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval default interval '0')
returns boolean
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_rows integer;
begin
  perform settle_private._check_operation_key(release_reconciliation.tenant, release_reconciliation.key);
  if retry_after is null or retry_after < interval '0' or retry_after > interval '1 day'
     or not settle_private._exact(retry_after) then
    perform settle_private._raise('SE008', 'retry_after must be an exact duration between 0 and 1 day',
      jsonb_build_object('field', 'retry_after'), null);
  end if;
  update settle_private.reconciliation_leases l
     set expires_at = clock_timestamp() + release_reconciliation.retry_after
   where l.tenant = release_reconciliation.tenant and l.key = release_reconciliation.key
     and l.lease_token = release_reconciliation.lease_token;
  get diagnostics v_rows = row_count;
  return v_rows > 0;
end
$$;

comment on function settle.release_reconciliation(text, text, uuid, interval) is
  'Give back a reconciler lease on an operation the downstream could not decide (yet): another reconciler may lease it after retry_after.
Parameters: tenant, key, lease_token (from settle.lease_reconciliation), retry_after (0 - 1 day, default 0).
Outcomes: true when the lease was this token''s (and is now released), false otherwise (lapsed and taken by another, or resolved).
SQLSTATEs: SE001, SE002, SE008. Locking: the lease row. Idempotency: repeating moves the release time again.';

-- ---------------------------------------------------------------------------------------
-- Retention and upkeep
-- ---------------------------------------------------------------------------------------

-- Default retention of terminal operations: 7 days (docs/operations.md "Retention": longer
-- than any client's retry horizon and than a week-end's incident, short enough that the tables
-- stay at the size of a week of traffic). Unresolved operations are never purged.
insert into settle_private.settings (name, value, updated_at)
values ('retention', interval '7 days', clock_timestamp());

-- Default age after which an abandoned in-doubt operation is dead-lettered: 15 minutes, longer
-- than a client's retry loop (which opens an attempt, and so touches the operation, on every
-- retry with reconcile) and short enough that a charged payout is checked within the hour.
insert into settle_private.settings (name, value, updated_at)
values ('in_doubt_after', interval '15 minutes', clock_timestamp());

create table settle_private.upkeep_jobs (
  job text not null,
  every interval not null,
  created_at timestamptz not null,
  last_started_at timestamptz,
  last_finished_at timestamptz,
  last_ok boolean,
  last_detail jsonb,
  last_error text,
  last_by text,
  runs bigint not null default 0,
  failures bigint not null default 0,
  constraint upkeep_jobs_pkey primary key (job),
  constraint upkeep_job_is_known check (job in ('expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed')),
  constraint upkeep_every_in_range check (every between interval '1 second' and interval '1 day')
);
comment on table settle_private.upkeep_jobs is
  'The upkeep jobs settle.run_upkeep runs (expire_leases, dead_letter_in_doubt, purge, trim_feed): how often, and what their last run did. Private: read settle.upkeep.';
alter table settle_private.upkeep_jobs enable row level security;
alter table settle_private.upkeep_jobs force row level security;
create policy owner_only on settle_private.upkeep_jobs to settle_owner using (true) with check (true);
revoke all on settle_private.upkeep_jobs from public;

insert into settle_private.upkeep_jobs (job, every, created_at)
values ('expire_leases', interval '1 minute', clock_timestamp()),
       ('dead_letter_in_doubt', interval '1 minute', clock_timestamp()),
       ('purge', interval '1 hour', clock_timestamp()),
       ('trim_feed', interval '1 minute', clock_timestamp());

create view settle.upkeep as
select j.job, j.every,
       case when j.job = 'purge' then (select s.value from settle_private.settings s where s.name = 'retention') end as retention,
       j.last_started_at, j.last_finished_at, j.last_ok, j.last_detail, j.last_error, j.last_by, j.runs, j.failures,
       coalesce(j.last_started_at + j.every, j.created_at) as next_due_at,
       clock_timestamp() > coalesce(j.last_finished_at, j.created_at) + 2 * j.every + interval '1 minute' as overdue
  from settle_private.upkeep_jobs j;
comment on view settle.upkeep is
  'The upkeep jobs (expire_leases, dead_letter_in_doubt, purge, trim_feed) settle.run_upkeep runs: every (the interval), retention (purge: terminal operations older than this go), the last run (started, finished, ok, detail, error, by whom), runs and failures, next_due_at, and overdue: no run finished within twice the interval plus a minute (nothing runs settle.run_upkeep: schedule it, docs/operations.md "Upkeep").';

-- The in-doubt step for one operation found by dead_letter_in_doubt's lock-free scan: lock the
-- row without waiting (a busy row is a live caller: left alone), decide again under the lock
-- (unleased, not dead-lettered, untouched since `cutoff`, may have taken effect) and dead-letter
-- it needs_reconciliation through _dead_letter (00006), as a spent budget would. Returns 1
-- (dead-lettered) or 0. One operation's rows, found by (tenant, key): on Citus the call is
-- delegated to the worker holding the key (force_delegation, sql/citus/distribute.sql).
create function settle_private._dead_letter_in_doubt_key(tenant text, key text, cutoff timestamptz, as_of timestamptz,
                                                         actor text)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
  v_after settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _dead_letter_in_doubt_key.tenant and o.key = _dead_letter_in_doubt_key.key
     and o.lease_token is null and o.dead_lettered_at is null
     and o.status in ('pending', 'unknown', 'conflict') and o.updated_at <= _dead_letter_in_doubt_key.cutoff
   for update skip locked;
  if not found or not settle_private._may_have_taken_effect(v_op.tenant, v_op.key, v_op.status, v_op.attempt) then
    return 0;
  end if;
  v_after := settle_private._dead_letter(v_op, _dead_letter_in_doubt_key.as_of, null);
  perform settle_private._audit(v_op.tenant, v_op.key, _dead_letter_in_doubt_key.as_of, 'expire', 'dead_lettered',
    v_op.attempt, v_op.status, v_after.status, _dead_letter_in_doubt_key.actor,
    jsonb_build_object('dead_letter_reason', v_after.dead_letter_reason, 'cause', 'in_doubt_abandoned',
                       'idle_since', v_op.updated_at, 'attempts', v_op.attempt, 'max_attempts', v_op.max_attempts));
  return 1;
end
$$;

-- dead_letter_in_doubt(older_than, batch_size) -> operations dead-lettered
create function settle.dead_letter_in_doubt(older_than interval default null, batch_size integer default 1000)
returns integer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_after interval := dead_letter_in_doubt.older_than;
  v_cutoff timestamptz;
  -- Plain values for the per-key call (Citus refuses a forced delegation carrying an expression).
  v_actor text := session_user::text;
  v_mine text[] := settle_private._visible_tenants();
  v_due record;
  v_done integer;
  v_count integer := 0;
begin
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  if v_after is null then
    select s.value into v_after from settle_private.settings s where s.name = 'in_doubt_after';
  elsif v_after < interval '0' or not settle_private._exact(v_after) then
    perform settle_private._raise('SE008', 'older_than must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  v_cutoff := v_now - v_after;
  -- A lock-free scan (on Citus a multi-shard read) through operations_needing_attention_idx, then
  -- one locked, re-checked step per key. A pending operation qualifies only if an attempt did
  -- not record a failure (a lapsed lease nobody reported on): every attempt failing retryably is
  -- not in doubt, and is left for its caller.
  for v_due in
    select o.tenant, o.key from settle_private.operations o
     where o.status in ('pending', 'unknown', 'conflict') and o.dead_lettered_at is null and o.lease_token is null
       and o.updated_at <= v_cutoff
       and (o.status <> 'pending'
            or exists (select 1 from settle_private.attempts a
                        where a.tenant = o.tenant and a.key = o.key and a.observation is distinct from 'failed')
            or not exists (select 1 from settle_private.attempts a
                            where a.tenant = o.tenant and a.key = o.key and a.attempt = o.attempt))
       and (v_mine is null or o.tenant = any (v_mine))
     order by o.updated_at
     limit batch_size
  loop
    -- The FROM form, so that Citus can delegate the call from inside this function.
    select r into v_done from settle_private._dead_letter_in_doubt_key(v_due.tenant, v_due.key, v_cutoff, v_now, v_actor) r;
    v_count := v_count + v_done;
  end loop;
  return v_count;
end
$$;

comment on function settle.dead_letter_in_doubt(interval, integer) is
  'Maintenance (the dead_letter_in_doubt upkeep job): dead-letter needs_reconciliation the operations that may have taken effect and that nobody came back for: status unknown or conflict (or pending after a lapsed lease no attempt reported on), no lease held, not dead-lettered, and untouched (no claim, attempt or observation) for older_than. They have budget left, so no attempt would dead-letter them, and a caller that gave up after a timeout leaves them so for good; dead-lettered, the reconciler (settle.lease_reconciliation), settle.dead_letters and `pg-settle dead-letters` see them.
Parameters: older_than (exact, >= 0; default NULL: the stored in_doubt_after, 15 minutes unless settle.set_in_doubt_after changed it); batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations dead-lettered. Each writes an audit row (event expire, outcome dead_lettered, detail cause in_doubt_abandoned, idle_since, dead_letter_reason needs_reconciliation); a pending one moves to unknown, as a spent budget would move it. A caller that claims it afterwards is answered unknown (dead-lettered); a matching success of an earlier attempt still settles it.
SQLSTATEs: SE008 (older_than, batch_size). A login bound to tenants handles only their operations.
Locking: finds candidates without locks, then locks each (FOR UPDATE SKIP LOCKED: a row a caller holds is left) and decides again under the lock. Idempotency: safe to run concurrently and repeatedly.';

-- set_in_doubt_after(older_than) -> the new age
create function settle.set_in_doubt_after(older_than interval)
returns interval
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_before interval;
  v_now timestamptz := clock_timestamp();
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_in_doubt_after', '{}'::jsonb);
  end if;
  if older_than is null or not settle_private._exact(older_than)
     or older_than not between interval '1 second' and interval '30 days' then
    perform settle_private._raise('SE008', 'older_than must be an exact duration between 1 second and 30 days',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  select s.value into v_before from settle_private.settings s where s.name = 'in_doubt_after' for update;
  insert into settle_private.settings as s (name, value, updated_at)
  values ('in_doubt_after', older_than, v_now)
  on conflict on constraint settings_pkey do update set value = excluded.value, updated_at = excluded.updated_at;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'set_in_doubt_after', session_user::text, jsonb_build_object('before', v_before::text, 'after', older_than::text));
  return older_than;
end
$$;

comment on function settle.set_in_doubt_after(interval) is
  'Set how long an operation that may have taken effect (unknown, conflict, or pending after a lapsed lease) may stay untouched, with no lease and budget left, before the dead_letter_in_doubt upkeep job dead-letters it needs_reconciliation for the reconciler (default 15 minutes). Longer than your callers'' retry horizon: a caller that comes back later is answered unknown (dead-lettered).
Parameters: older_than, an exact duration between 1 second and 30 days.
Outcomes: the new age; logged in settle.admin_log (event set_in_doubt_after, before and after).
SQLSTATEs: SE008 (bad duration), SE019 (a login bound to tenants). Locking: the settings row. Idempotency: setting the same value again changes nothing but the log.';

create type settle.upkeep_run as (
  job text,
  outcome text,
  detail jsonb
);
comment on type settle.upkeep_run is
  'A row of settle.run_upkeep: job; outcome ran | failed (detail.error) | not_due | busy (another caller is running it); detail (expire_leases: expired, dead_lettered; dead_letter_in_doubt: dead_lettered, in_doubt_after; purge: purged, retention; trim_feed: trimmed).';

-- run_upkeep(job, force) -> one row per job
create function settle.run_upkeep(job text default null, force boolean default false)
returns setof settle.upkeep_run
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job settle_private.upkeep_jobs;
  v_name text;
  v_now timestamptz;
  v_detail jsonb;
  v_expired settle.expire_result;
  v_total_expired integer;
  v_total_dead integer;
  v_purged integer;
  v_total_purged integer;
  v_trimmed integer;
  v_total_trimmed integer;
  v_in_doubt integer;
  v_total_in_doubt integer;
  v_retention interval;
  v_rounds integer;
  v_batch constant integer := 1000;
  v_trim_batch constant integer := 10000;
  v_max_rounds constant integer := 20;
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('run_upkeep', '{}'::jsonb);
  end if;
  if run_upkeep.job is not null and run_upkeep.job not in ('expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed') then
    perform settle_private._raise('SE008', 'job must be expire_leases, dead_letter_in_doubt, purge or trim_feed (or NULL for all four)',
      jsonb_build_object('field', 'job'), null);
  end if;
  -- expire_leases first: a lapsed lease it ends makes its operation touched now, so an
  -- operation is never dead-lettered as abandoned in the run that found its caller's lease lapsed.
  foreach v_name in array array['expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed'] loop
    continue when run_upkeep.job is not null and run_upkeep.job <> v_name;
    v_now := clock_timestamp();
    -- The job row's lock is the leader election: a second caller skips a job being run.
    select * into v_job from settle_private.upkeep_jobs j where j.job = v_name for update skip locked;
    if not found then
      return next row(v_name, 'busy', null)::settle.upkeep_run;
      continue;
    end if;
    if not run_upkeep.force and v_job.last_started_at is not null and v_job.last_started_at + v_job.every > v_now then
      return next row(v_name, 'not_due', jsonb_build_object('next_due_at', v_job.last_started_at + v_job.every))::settle.upkeep_run;
      continue;
    end if;
    begin
      v_rounds := 0;
      if v_name = 'expire_leases' then
        v_total_expired := 0;
        v_total_dead := 0;
        loop
          v_expired := settle.expire_leases(v_batch);
          v_total_expired := v_total_expired + v_expired.expired;
          v_total_dead := v_total_dead + v_expired.dead_lettered;
          v_rounds := v_rounds + 1;
          exit when v_expired.expired < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('expired', v_total_expired, 'dead_lettered', v_total_dead);
      elsif v_name = 'dead_letter_in_doubt' then
        select s.value into v_retention from settle_private.settings s where s.name = 'in_doubt_after';
        v_total_in_doubt := 0;
        loop
          v_in_doubt := settle.dead_letter_in_doubt(v_retention, v_batch);
          v_total_in_doubt := v_total_in_doubt + v_in_doubt;
          v_rounds := v_rounds + 1;
          exit when v_in_doubt < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('dead_lettered', v_total_in_doubt, 'in_doubt_after', v_retention::text);
      elsif v_name = 'trim_feed' then
        -- Feed events every registered consumer has acknowledged (settle.trim_feed, 00013): an
        -- event some consumer still has to read stays, whatever its age.
        v_total_trimmed := 0;
        loop
          v_trimmed := settle.trim_feed(v_trim_batch);
          v_total_trimmed := v_total_trimmed + v_trimmed;
          v_rounds := v_rounds + 1;
          exit when v_trimmed < v_trim_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('trimmed', v_total_trimmed);
      else
        select s.value into v_retention from settle_private.settings s where s.name = 'retention';
        v_total_purged := 0;
        loop
          v_purged := settle.purge(v_retention, v_batch);
          v_total_purged := v_total_purged + v_purged;
          v_rounds := v_rounds + 1;
          exit when v_purged < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('purged', v_total_purged, 'retention', v_retention::text);
      end if;
      update settle_private.upkeep_jobs j
         set last_started_at = v_now, last_finished_at = clock_timestamp(), last_ok = true, last_detail = v_detail,
             last_error = null, last_by = session_user::text, runs = j.runs + 1
       where j.job = v_name;
      return next row(v_name, 'ran', v_detail)::settle.upkeep_run;
    exception when others then
      -- The job's work rolls back; its failure is recorded (and stats shows it).
      v_detail := jsonb_build_object('sqlstate', sqlstate, 'error', sqlerrm);
      update settle_private.upkeep_jobs j
         set last_started_at = v_now, last_finished_at = clock_timestamp(), last_ok = false, last_detail = v_detail,
             last_error = sqlerrm, last_by = session_user::text, runs = j.runs + 1, failures = j.failures + 1
       where j.job = v_name;
      return next row(v_name, 'failed', v_detail)::settle.upkeep_run;
    end;
  end loop;
end
$$;

comment on function settle.run_upkeep(text, boolean) is
  'Run the upkeep jobs that are due: expire_leases (settle.expire_leases until a batch is not full, at most 20 batches of 1000), dead_letter_in_doubt (settle.dead_letter_in_doubt with the stored in_doubt_after, same bounds: operations that may have taken effect and that nobody touched since become dead letters needing reconciliation), purge (settle.purge with the stored retention, same bounds) and trim_feed (settle.trim_feed until a batch is not full, at most 20 batches of 10000; never an event a registered consumer has not acknowledged). What pg_cron or `pg-settle maintain` call (docs/operations.md "Upkeep").
Parameters: job (expire_leases, dead_letter_in_doubt, purge, trim_feed, or NULL for all); force (run even if not due, default false).
Outcomes: one row per job: ran (detail: counts) | failed (detail: sqlstate, error; the job''s work is rolled back, the failure recorded) | not_due (ran less than its interval ago) | busy (another caller holds the job: leader election by the job row''s lock, SKIP LOCKED). Each run is recorded in settle.upkeep.
SQLSTATEs: SE008 (unknown job), SE019 (a login bound to tenants: upkeep is engine-wide).
Locking: the job''s row in settle_private.upkeep_jobs for the run (FOR UPDATE SKIP LOCKED), then the locks of expire_leases, dead_letter_in_doubt, purge and trim_feed. Idempotency: safe to call from several processes at once and repeatedly.';

-- set_retention(older_than) -> the new retention
create function settle.set_retention(older_than interval)
returns interval
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_before interval;
  v_min interval;
  v_now timestamptz := clock_timestamp();
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_retention', '{}'::jsonb);
  end if;
  if older_than is null or older_than < interval '0' or not settle_private._exact(older_than) then
    perform settle_private._raise('SE008', 'older_than must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  select s.value into v_min from settle_private.settings s where s.name = 'purge_min_retention';
  if older_than < coalesce(v_min, interval '24 hours') then
    perform settle_private._raise('SE014', 'older_than is shorter than the minimum retention',
      jsonb_build_object('older_than', older_than::text, 'purge_min_retention', coalesce(v_min, interval '24 hours')::text),
      'Keep longer, or lower the minimum explicitly: select settle.set_purge_min_retention(interval ''...'').');
  end if;
  select s.value into v_before from settle_private.settings s where s.name = 'retention' for update;
  insert into settle_private.settings as s (name, value, updated_at)
  values ('retention', older_than, v_now)
  on conflict on constraint settings_pkey do update set value = excluded.value, updated_at = excluded.updated_at;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'set_retention', session_user::text, jsonb_build_object('before', v_before::text, 'after', older_than::text));
  return older_than;
end
$$;

comment on function settle.set_retention(interval) is
  'Set how long terminal (completed or failed, not dead-lettered) operations are kept before the purge upkeep job removes them (default 7 days). Unresolved operations are never purged.
Parameters: older_than, an exact duration not shorter than purge_min_retention (default 24 hours).
Outcomes: the new retention; logged in settle.admin_log (event set_retention, before and after).
SQLSTATEs: SE008 (bad duration), SE014 (shorter than purge_min_retention), SE019 (a login bound to tenants). Locking: the settings row. Idempotency: setting the same value again changes nothing but the log.';

-- set_upkeep_interval(job, every) -> the new interval
create function settle.set_upkeep_interval(job text, every interval)
returns interval
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_before interval;
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_upkeep_interval', '{}'::jsonb);
  end if;
  if set_upkeep_interval.job is null or set_upkeep_interval.job not in ('expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed') then
    perform settle_private._raise('SE008', 'job must be expire_leases, dead_letter_in_doubt, purge or trim_feed', jsonb_build_object('field', 'job'), null);
  end if;
  if every is null or not settle_private._exact(every) or every not between interval '1 second' and interval '1 day' then
    perform settle_private._raise('SE008', 'every must be an exact duration between 1 second and 1 day',
      jsonb_build_object('field', 'every'), null);
  end if;
  select j.every into v_before from settle_private.upkeep_jobs j where j.job = set_upkeep_interval.job for update;
  update settle_private.upkeep_jobs j set every = set_upkeep_interval.every where j.job = set_upkeep_interval.job;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (clock_timestamp(), 'set_upkeep_interval', session_user::text,
          jsonb_build_object('job', set_upkeep_interval.job, 'before', v_before::text, 'after', every::text));
  return every;
end
$$;

comment on function settle.set_upkeep_interval(text, interval) is
  'Set how often an upkeep job is due (defaults: expire_leases 1 minute, dead_letter_in_doubt 1 minute, purge 1 hour, trim_feed 1 minute).
Parameters: job (expire_leases, dead_letter_in_doubt, purge or trim_feed), every (1 second - 1 day, exact).
Outcomes: the new interval; logged in settle.admin_log (event set_upkeep_interval).
SQLSTATEs: SE008, SE019 (a login bound to tenants). Locking: the job row (waits for a running job). Idempotency: repeatable.';

-- ---------------------------------------------------------------------------------------
-- Gauges: reconciliation and upkeep in settle.metrics
-- ---------------------------------------------------------------------------------------

-- settle.metrics counts the recent resolutions through this partial index: it holds the resolve
-- rows that changed an operation, never a row of a normal claim or settlement.
create index audit_log_resolutions_by_at_idx
  on settle_private.audit_log (at)
  where event = 'resolve' and outcome = 'resolved';

-- Whether reconciliation keeps up (the backlog itself is dead_letters_needs_reconciliation, 00011)
-- and whether upkeep runs. A login bound to tenants counts only their rows; the upkeep jobs are
-- engine-wide (settle.upkeep).
create function settle_private._upkeep_metrics()
returns table (reconciliation_leased bigint, oldest_needs_reconciliation_age_seconds double precision,
               resolutions_recent bigint, upkeep_jobs_overdue bigint, upkeep_jobs_failing bigint,
               in_doubt_under_5m bigint, in_doubt_5m_to_1h bigint, in_doubt_over_1h bigint)
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
select (select count(*) from settle_private.reconciliation_leases l
         where l.expires_at > w.now
           and (w.tenants is null or l.tenant = any (w.tenants))) as reconciliation_leased,
       coalesce((select extract(epoch from w.now - min(o.dead_lettered_at))::float8
                   from settle_private.operations o where o.dead_lettered_at is not null and o.status between 'unknown' and 'conflict'
                    and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_needs_reconciliation_age_seconds,
       (select count(*) from settle_private.audit_log a
         where a.event = 'resolve' and a.outcome = 'resolved' and a.at > w.now - w.recent
           and (w.tenants is null or a.tenant = any (w.tenants))) as resolutions_recent,
       (select count(*) from settle.upkeep u where u.overdue) as upkeep_jobs_overdue,
       (select count(*) from settle_private.upkeep_jobs j where j.last_ok = false) as upkeep_jobs_failing,
       -- In doubt and not (yet) dead-lettered, by how long nobody touched them: what the
       -- dead_letter_in_doubt job hands to the reconciler once they pass in_doubt_after. Scalar
       -- subqueries, like the gauges above: Citus refuses a lateral join of the distributed
       -- operations to this local row. The statuses as a list (which proves the partial index's
       -- predicate) and as a range (which the planner prices as few rows: behind row-level
       -- security it has no statistics of status, and the list alone looked like half the table,
       -- read sequentially; the dead-letter read above is a range for the same reason, 00011).
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at > w.now - interval '5 minutes'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_under_5m,
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at <= w.now - interval '5 minutes' and o.updated_at > w.now - interval '1 hour'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_5m_to_1h,
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at <= w.now - interval '1 hour'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_over_1h
  from (select clock_timestamp() as now, interval '5 minutes' as recent,
               settle_private._visible_tenants() as tenants) w
$$;
comment on function settle_private._upkeep_metrics() is
  'The reconciliation, upkeep and in-doubt gauges of settle.metrics (one row), run with jit = off. Internal: read settle.metrics.';

-- settle.metrics gains them (the columns of 00011 and 00013 first, unchanged).
create or replace view settle.metrics as
select m.*, f.feed_consumers, f.feed_lag_events, f.feed_lag_seconds, f.feed_events_retained,
       u.reconciliation_leased, u.oldest_needs_reconciliation_age_seconds, u.resolutions_recent,
       u.upkeep_jobs_overdue, u.upkeep_jobs_failing,
       f.feed_horizon_age_seconds, f.feed_horizon_xid_age, f.feed_horizon_held_by_consumer,
       u.in_doubt_under_5m, u.in_doubt_5m_to_1h, u.in_doubt_over_1h
  from settle_private._metrics() m, settle_private._feed_metrics() f, settle_private._upkeep_metrics() u;
comment on view settle.metrics is
  'Gauges for monitoring, one row, each read from a partial index or a small table (cheap at any table size): live leases (operations_in_flight), leases past expiry not yet taken over or swept (lapsed_leases), unknown operations and the age in seconds of the least recently touched one, operations in conflict, dead letters by reason (failed: every attempt failed; needs_reconciliation: an attempt may have taken effect) and the oldest dead letter''s age, and in the last recent_window_seconds (300): conflicts and refused observations; the settlement feed (consumers, the largest lag in events and the age of the oldest unacknowledged event, events retained); reconciliation (operations a reconciler holds a lease on, the age of the oldest dead letter needing reconciliation, resolutions in the window); upkeep (jobs overdue, jobs whose last run failed); the feed''s horizon (the age in seconds and in transaction ids of the oldest transaction holding it back, and 1 when a feed consumer''s transaction is that one: settle.feed_horizon names it); operations in doubt (unknown or conflict, not dead-lettered) by how long nobody touched them (under 5 minutes, 5 minutes to 1 hour, over 1 hour): the dead_letter_in_doubt upkeep job dead-letters them for reconciliation after in_doubt_after. docs/observability.md lists every column.';

reset role;
