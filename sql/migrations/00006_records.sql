-- 00006: the helpers every API function uses on one operation's records.
--
-- Why: each rule below used to be written out in every function that needed it; now it
-- lives once:
--   _lock_operation     lock the operation row (FOR UPDATE) or raise SE010 (not found);
--   _audit              append one audit row, in the caller's transaction;
--   _lock_diff          which parts of the reservation lock a caller presented differently;
--   _fence_reason       why an attempt that no longer holds the lease is fenced;
--   _is_attempt_token   whether a token is an attempt's (current or recorded);
--   _record_attempt     write the record of the current attempt from the operation row;
--   _record_observation write an attempt's observation that does not settle, and stamp its
--                       end (once);
--   _end_attempt        end an attempt without an observation (expiry, exhaustion, settled
--                       by another attempt);
--   _dead_letter        dead-letter an operation whose attempt budget is spent, as failed or
--                       as needing reconciliation;
--   _expire             end a lapsed lease (claim takes over with it, the sweeper sweeps).
-- They are PL/pgSQL (plans cached per session) or inlinable SQL, never non-inlinable SQL
-- functions, which PostgreSQL parses and plans again in every transaction. The writers return
-- true, so that callers invoke them as an assignment (`v_writes := v_writes + settle_private._audit(...)`),
-- which PL/pgSQL evaluates as a simple expression; PERFORM would start a full executor query
-- per call (measured: 8% of the claim + complete cycle's server CPU, bench/sql/cycle-cpu-loop.sql).

set local role settle_owner;

-- Lock the operation row of (tenant, key) for the rest of the transaction; SE010 if there is
-- none (never claimed, or purged). Every writer of one operation goes through this lock, which
-- serializes them without advisory locks (portable to a sharded cluster).
-- With purged_ok, a key that settle.purge removed (its tombstone audit row is there) returns
-- an all-NULL row instead of raising: the caller answers without disclosing anything and
-- audits the straggler's call (a call on a purged key leaves a trace).
-- With lock => false it is the same look-up as a plain read, for the answers that change
-- nothing and so must not wait on the row (an invalid token takes no lock).
create function settle_private._lock_operation(tenant text, key text, purged_ok boolean default false,
  lock boolean default true)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
begin
  if lock then
    select * into v_op from settle_private.operations o
     where o.tenant = _lock_operation.tenant and o.key = _lock_operation.key
     for update;
  else
    select * into v_op from settle_private.operations o
     where o.tenant = _lock_operation.tenant and o.key = _lock_operation.key;
  end if;
  if not found and purged_ok and exists (
       select 1 from settle_private.audit_log l
        where l.tenant = _lock_operation.tenant and l.key = _lock_operation.key and l.event = 'purge') then
    return v_op;
  end if;
  if not found then
    perform settle_private._raise('SE010', 'operation not found',
      jsonb_build_object('tenant', _lock_operation.tenant, 'key', _lock_operation.key),
      'No operation has this tenant and key: claim it first with settle.claim (a purged key is gone).');
  end if;
  return v_op;
end
$$;

-- The number of the next event in the history of (tenant, key) (seq: see
-- settle_private.audit_log): after its audit rows and the events logged on its operation and
-- attempt rows (a claim that opened an attempt, the success that settled). Read from the
-- operation's own rows, through the primary keys: no global sequence, so the order holds on
-- Citus whichever node writes. settle.complete reads the same number in its own statements
-- (00010).
create function settle_private._next_seq(tenant text, key text)
returns bigint
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_seq bigint;
begin
  select coalesce(greatest(
           (select max(l.seq) from settle_private.audit_log l where l.tenant = _next_seq.tenant and l.key = _next_seq.key),
           (select max(a.claim_seq) from settle_private.attempts a
             where a.tenant = _next_seq.tenant and a.key = _next_seq.key),
           (select greatest(o.claim_seq, o.settled_seq) from settle_private.operations o
             where o.tenant = _next_seq.tenant and o.key = _next_seq.key)), 0) + 1
    into v_seq;
  return v_seq;
end
$$;

-- Append one audit row (keyed like its operation, so it lives on the operation's shard),
-- numbered next in its operation's history (_next_seq), with the authenticated login
-- (session_user) beside the caller-supplied actor.
--
-- Evidence is bounded per key: of the rows a caller can cause without holding
-- the lease or the lock (outcome refused, fenced or conflict), a key keeps the first
-- refusal_rows (20) in full; every later one is folded into its settle_private.audit_overflow
-- row (count, first and last time, the last call's event, outcome, login and actor, and a chained
-- SHA-256 of each folded detail), so a flood of calls with random tokens writes a bounded
-- amount. Each full row's detail is bounded too (settle_private._presented, 00007). A refusal
-- that moved the status is never folded: the history shows every transition, and those are
-- bounded by the lattice (the status only rises; each move needs a valid attempt token).
create function settle_private._audit(
  tenant text, key text, at timestamptz, event text, outcome text, attempt integer,
  status_before settle.status, status_after settle.status, actor text, detail jsonb)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_seq bigint;
  v_digest bytea;
begin
  -- A refusal that moved the status (a mismatched success moves it to conflict, a revoked
  -- reservation is converted) is a transition: always a row of its own, never only counted.
  if _audit.outcome in ('refused', 'fenced', 'conflict') and _audit.status_before is not distinct from _audit.status_after
     and (exists (select 1 from settle_private.audit_overflow x where x.tenant = _audit.tenant and x.key = _audit.key)
          or (select count(*) from (select 1 from settle_private.audit_log l
                                     where l.tenant = _audit.tenant and l.key = _audit.key
                                       and l.outcome in ('refused', 'fenced', 'conflict')
                                     limit settle_private._limit('refusal_rows')) r) >= settle_private._limit('refusal_rows')) then
    -- Computed first: Citus allows only IMMUTABLE functions in ON CONFLICT DO UPDATE.
    v_digest := sha256(convert_to(coalesce(_audit.detail::text, ''), 'UTF8'));
    insert into settle_private.audit_overflow as x
      (tenant, key, refusals, first_at, last_at, last_event, last_outcome, last_login, last_actor, digest)
    values
      (_audit.tenant, _audit.key, 1, _audit.at, _audit.at, _audit.event, _audit.outcome, session_user::text, _audit.actor, v_digest)
    on conflict on constraint audit_overflow_pkey do update
       set refusals = x.refusals + 1, last_at = greatest(x.last_at, excluded.last_at), last_event = excluded.last_event,
           last_outcome = excluded.last_outcome, last_login = excluded.last_login, last_actor = excluded.last_actor,
           digest = sha256(x.digest || excluded.digest);
    return 1;
  end if;
  -- Two statements, not one INSERT ... SELECT: Citus refuses that inside the maintenance steps
  -- it delegates from a query on a shard (_expire_key, _purge_key).
  v_seq := settle_private._next_seq(_audit.tenant, _audit.key);
  insert into settle_private.audit_log
    (tenant, key, seq, at, event, outcome, attempt, status_before, status_after, actor, detail, login)
  values
    (_audit.tenant, _audit.key, v_seq, _audit.at, _audit.event, _audit.outcome, _audit.attempt,
     _audit.status_before, _audit.status_after, _audit.actor, _audit.detail, session_user::text);
  return 1;
end
$$;

-- The parts of the reservation lock of `op` that the presented values do not match:
-- request (fingerprint), principal, scopes (compared as sets), binding_generation.
create function settle_private._lock_diff(
  op settle_private.operations, fingerprint text, principal text, scopes text[], binding_generation bigint)
returns text[]
language sql
immutable
as $$
  select array_remove(array[
    case when op.fingerprint is distinct from _lock_diff.fingerprint then 'request' end,
    case when op.principal is distinct from _lock_diff.principal then 'principal' end,
    case when op.scopes is distinct from settle_private._normalize_scopes(_lock_diff.scopes) then 'scopes' end,
    case when op.binding_generation is distinct from _lock_diff.binding_generation then 'binding_generation' end
  ], null)
$$;

-- What a conflicting caller is told of `diff` (settle_private._lock_diff): the parts only to the
-- holder of the same binding, who can then tell "you changed the request" ({request}); anyone
-- whose principal, scopes or binding generation differ learns only {binding}, never whether the
-- request matched too (a per-part answer let a stranger recover a lock one part at
-- a time). The audit log keeps the full list for operators.
create function settle_private._conflict_on(diff text[])
returns text[]
language sql
immutable
as $$
  select case when diff <@ array['request'] then diff else array['binding'] end
$$;

-- Why `attempt` of `op` no longer holds the lease: the operation is settled (completed or
-- failed), a later attempt exists (superseded), or this attempt's lease was released (it
-- reported, or the sweeper expired it).
create function settle_private._fence_reason(op settle_private.operations, attempt integer)
returns text
language sql
immutable
as $$
  select case
    when op.status in ('completed', 'failed') then 'settled'
    when op.attempt > _fence_reason.attempt then 'superseded'
    else 'lease_released' end
$$;

-- The record of the current attempt of (tenant, key) in settle_private.attempts, written from
-- the operation row if it is not there yet (caller holds the row lock): an attempt gets its
-- record when it ends, reports an observation that does not settle, or is superseded by a new
-- epoch (00002). Its identity and claim log are copied as the operation holds them (the guard
-- of attempts checks they are). An attempt that is not the current one has its record already.
-- Two statements, not one INSERT ... SELECT: Citus refuses that inside the maintenance steps it
-- delegates from a query on a shard (_expire_key, _purge_key).
create function settle_private._record_attempt(tenant text, key text, attempt integer)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op record;
  v_rows integer;
begin
  select o.attempt_token, o.worker, o.claimed_at, o.claimed_by, o.claim_seq, o.claim_audit_id, o.claim_status_before,
         o.claim_status_after
    into v_op
    from settle_private.operations o
   where o.tenant = _record_attempt.tenant and o.key = _record_attempt.key and o.attempt = _record_attempt.attempt;
  if not found then
    return 0;
  end if;
  insert into settle_private.attempts as a
    (tenant, key, attempt, lease_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id,
     claim_status_before, claim_status_after)
  values
    (_record_attempt.tenant, _record_attempt.key, _record_attempt.attempt, v_op.attempt_token, v_op.worker,
     v_op.claimed_at, v_op.claimed_by, v_op.claim_seq, v_op.claim_audit_id, v_op.claim_status_before,
     v_op.claim_status_after)
  on conflict on constraint attempts_pkey do nothing;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

-- Whether `token` is the token of attempt `attempt` of (tenant, key): the current attempt's on the
-- operation row, or a recorded attempt's. An attempt's token never changes, so any snapshot
-- answers the same. PL/pgSQL, not SQL: on Citus a SQL function with parameters that reads a
-- distributed table cannot be planned ("could not create distributed plan").
create function settle_private._is_attempt_token(tenant text, key text, attempt integer, token uuid)
returns boolean
language plpgsql
stable
as $$
begin
  return exists (select 1 from settle_private.operations o
                  where o.tenant = _is_attempt_token.tenant and o.key = _is_attempt_token.key
                    and o.attempt = _is_attempt_token.attempt and o.attempt_token = _is_attempt_token.token)
      or exists (select 1 from settle_private.attempts a
                  where a.tenant = _is_attempt_token.tenant and a.key = _is_attempt_token.key
                    and a.attempt = _is_attempt_token.attempt and a.lease_token = _is_attempt_token.token);
end
$$;

-- Write an attempt's observation that does not settle (the guard trigger refuses a second
-- terminal one) and stamp its end with reason `observed` unless it already ended (expired or
-- superseded before it reported). The settling success is written by settle.complete's own
-- statement on the operation (00010): its attempt's record is not written for it.
create function settle_private._record_observation(
  tenant text, key text, attempt integer, observation settle.status, at timestamptz,
  error jsonb default null, retryable boolean default null, late_result jsonb default null)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_rows integer;
begin
  v_rows := settle_private._record_attempt(tenant, key, attempt);
  update settle_private.attempts a
     set observation = _record_observation.observation, observed_at = _record_observation.at,
         error = _record_observation.error, retryable = _record_observation.retryable,
         late_result = _record_observation.late_result,
         ended_at = coalesce(a.ended_at, _record_observation.at), end_reason = coalesce(a.end_reason, 'observed')
   where a.tenant = _record_observation.tenant and a.key = _record_observation.key
     and a.attempt = _record_observation.attempt;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

-- End an attempt that has not ended, without an observation: lease_expired, exhausted
-- (its lease lapsed and the budget is spent), settled_elsewhere or binding_revoked.
create function settle_private._end_attempt(tenant text, key text, attempt integer, at timestamptz, reason text)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_rows integer;
begin
  v_rows := settle_private._record_attempt(tenant, key, attempt);
  update settle_private.attempts a
     set ended_at = _end_attempt.at, end_reason = _end_attempt.reason
   where a.tenant = _end_attempt.tenant and a.key = _end_attempt.key and a.attempt = _end_attempt.attempt
     and a.ended_at is null;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

-- The attempt budget of `op` is spent and its last attempt has ended (caller holds the row
-- lock): dead-letter the operation. This is the one place that decides between the two dead
-- letters, because timeout means unknown, not failure:
--   * every attempt recorded a failure: status failed with `error`, reason attempts_exhausted
--     (settle.redrive may re-open it as pending);
--   * an attempt may have taken effect (it reported unknown, presented a mismatched success,
--     or its lease lapsed without an observation): the status is raised to unknown if it was
--     below, never to failed, reason needs_reconciliation. The effect must not run again until
--     an operator reconciled it; a matching success of an attempt still settles it.
create function settle_private._dead_letter(op settle_private.operations, as_of timestamptz, error jsonb)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
begin
  if settle_private._may_have_taken_effect(op.tenant, op.key, op.status, op.attempt) then
    update settle_private.operations o
       set status = case when settle_private._rank(op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else op.status end,
           lease_token = null, lease_expires_at = null, dead_lettered_at = as_of,
           dead_letter_reason = 'needs_reconciliation', updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  else
    update settle_private.operations o
       set status = 'failed', lease_token = null, lease_expires_at = null, dead_lettered_at = as_of,
           dead_letter_reason = 'attempts_exhausted', error = _dead_letter.error, updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  end if;
  return v_op;
end
$$;

-- Ends the lapsed lease of `op` (judged against `now`) and dead-letters the operation if
-- its attempt budget is spent. Caller holds the row lock. Returns the updated row.
create function settle_private._expire(op settle_private.operations, as_of timestamptz, actor text)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_op settle_private.operations := op;
  v_exhausted boolean := op.attempt >= op.max_attempts;
begin
  if v_op.lease_token is not null then
    v_writes := v_writes + settle_private._end_attempt(op.tenant, op.key, op.attempt, as_of,
      case when v_exhausted then 'exhausted' else 'lease_expired' end);
  end if;
  if v_exhausted then
    v_op := settle_private._dead_letter(op, as_of, jsonb_build_object('code', 'attempts_exhausted',
      'attempts', op.attempt, 'last_status', op.status::text));
  else
    update settle_private.operations o
       set status = case when op.status = 'running' then 'pending'::settle.status else op.status end,
           lease_token = null, lease_expires_at = null, updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  end if;
  v_writes := v_writes + settle_private._audit(op.tenant, op.key, as_of, 'expire',
    case when v_exhausted then 'dead_lettered' else 'expired' end, op.attempt, op.status, v_op.status, actor,
    jsonb_strip_nulls(jsonb_build_object('lease_expires_at', op.lease_expires_at,
                                         'dead_letter_reason', v_op.dead_letter_reason)));
  return v_op;
end
$$;

reset role;
