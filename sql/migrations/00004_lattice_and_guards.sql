-- 00004: the status lattice and the guard triggers that hold every writer to it.
--
-- Why: the functions of 00006-00012 implement the protocol, but the invariants below are
-- enforced by the schema itself, so a maintenance script or a DBA in psql is held to them too
-- (a rescuer that flips a completed job back to retryable is the bug class excluded here):
--   * the reservation lock (request fingerprint + authorization binding) never changes;
--   * the status never moves down the lattice (one audited exception: redrive of a
--     dead-lettered failure opens a new redrive generation);
--   * a completed result is written with the move to `completed` and never changes;
--   * each attempt holds at most one terminal observation (the attempt-scoped settlement
--     lock), and at most one attempt per operation is the settlement;
--   * the audit log is append-only; nothing is deleted except by settle.purge;
--   * the row rules (named like CHECK constraints, SQLSTATE 23514) tie status to columns.

set local role settle_owner;

-- Inlinable rank of the lattice, used by the guard triggers and the merge. The public,
-- documented form is settle.status_rank (below).
create function settle_private._rank(status settle.status)
returns smallint
language sql
immutable
parallel safe
as $$
  select case status
    when 'pending' then 1
    when 'running' then 1
    when 'unknown' then 2
    when 'conflict' then 3
    when 'failed' then 4
    when 'completed' then 5
    else 0
  end::smallint
$$;

-- status_rank(status) -> 1..5, the rank of a status in the lattice (0 for NULL)
create function settle.status_rank(status settle.status)
returns smallint
language sql
immutable
parallel safe
security definer
set search_path = pg_catalog, pg_temp
as $$
  select settle_private._rank(status)
$$;

comment on function settle.status_rank(settle.status) is
  'Rank of a status in the settlement lattice: pending and running 1, unknown 2, conflict 3, failed 4, completed 5; NULL (no observation) 0.
Parameters: status.
Outcomes: a smallint; never raises.
Locking: none. Idempotency: pure (IMMUTABLE).';

-- ---------------------------------------------------------------------------------------
-- Guard triggers. Numeric prefixes order them (PostgreSQL fires triggers in name order).
-- ENABLE ALWAYS keeps them firing under session_replication_role = replica.
-- The guards of operations and attempts (and the feed trigger, 00013) carry no
-- `SET search_path`: the clause makes every call save, set and restore the GUC and
-- recompute the search path, 3.5% of a claim + complete (docs/performance.md, seventh
-- session). They are SECURITY INVOKER and name every table, function and type of the engine
-- schema-qualified; built-in functions and operators resolve in pg_catalog, which is searched
-- first unless a session names it explicitly later in its path. Who fires them: the engine's
-- functions, which are SECURITY DEFINER and pin the path themselves, and direct writers, which
-- the owner_only policies and table grants (00002, 00015) limit to the owner and superusers,
-- who can disable or drop a trigger anyway: a pinned path would protect nothing from them.
-- Every SECURITY DEFINER function still pins its path (test/engine/security.test.ts).
-- ---------------------------------------------------------------------------------------

-- Whether operation (tenant, key), now at `status` with current attempt `attempt`, may have
-- taken effect: its status is unknown or conflict (a caller lost a response, or a success was
-- reported under a mismatched lock: that stays true whatever its attempts record later), or an
-- attempt did not record a failure (it reported unknown, presented a mismatched observation,
-- succeeded, or its lease lapsed or is still held without an observation). The current attempt
-- without a record in settle_private.attempts (00002) has observed nothing: it counts. Such an
-- operation is never `failed`. Read by the lattice guard when a status would move to `failed` or
-- back down from it, and by the engine when a failure would end the operation.
-- PL/pgSQL, not SQL: on Citus a SQL function with parameters that reads a distributed table
-- cannot be planned ("could not create distributed plan"), and this runs in a shard's trigger.
create function settle_private._may_have_taken_effect(tenant text, key text, status settle.status, attempt integer)
returns boolean
language plpgsql
stable
as $$
begin
  return _may_have_taken_effect.status in ('unknown', 'conflict')
      or exists (select 1 from settle_private.attempts a
                  where a.tenant = _may_have_taken_effect.tenant and a.key = _may_have_taken_effect.key
                    and a.observation is distinct from 'failed')
      or not exists (select 1 from settle_private.attempts a
                      where a.tenant = _may_have_taken_effect.tenant and a.key = _may_have_taken_effect.key
                        and a.attempt = _may_have_taken_effect.attempt);
end
$$;

-- Whether this transaction is applying a failed resolution of (tenant, key): the audit row
-- settle.resolve (00014) writes before its update (event resolve, outcome resolved,
-- status_after failed, and this transaction's id in its detail). Read by the failure guard of
-- _100_guard_lattice (below): the one move to failed it lets through after an attempt that may
-- have taken effect.
create function settle_private._resolving_failed(tenant text, key text)
returns boolean
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return exists (select 1 from settle_private.audit_log l
                  where l.tenant = _resolving_failed.tenant and l.key = _resolving_failed.key
                    and l.event = 'resolve' and l.outcome = 'resolved' and l.status_after = 'failed'
                    and l.detail ->> 'xact' = pg_current_xact_id()::text);
end
$$;

-- The guard of settle_private.operations, for INSERT (trigger _100_guard_insert) and UPDATE
-- (_100_guard_lattice), then the row rules (below), then the failure guard (a move to failed),
-- then the feed event of a move into a final status (00013). One function, so that the row rules are
-- written once; the rules are written out here rather than in a function taking the row,
-- because on Citus the trigger fires on a shard, whose row type is another type.
-- What it checks is only what the statement can break. An INSERT: a new row starts
-- unsettled, so of the state rules only those on the attempt budget and the lease apply. An
-- UPDATE: the reservation
-- lock's columns are the business of _050_guard_lock (below), so the rules on them alone
-- (their lengths, the fingerprint's format, a non-negative generation) are checked once, at
-- INSERT; each rule that applies to an earlier state only (a completed result, a move down)
-- is tested inside a branch that the settlement's UPDATE never enters. PL/pgSQL sets up an
-- expression again in every transaction, but only when it is evaluated: a rule in an untaken
-- branch costs nothing (docs/performance.md).
create function settle_private.tg_operations__guard()
returns trigger
language plpgsql
as $$
declare
  v_redrive boolean;
  v_rule text;
  v_previous xid8;
  v_wake boolean;
begin
  if tg_op = 'INSERT' then
    -- Who made the claim of the first attempt: the authenticated login, never the writer's word.
    -- The engine's own statements write session_user, so NEW is assigned only when a writer
    -- passed something else (or nothing): a PL/pgSQL assignment to a field of NEW expands the
    -- row and forms a new tuple at RETURN (docs/performance.md).
    if new.claimed_by is distinct from session_user::text then
      new.claimed_by := session_user::text;
    end if;
    if new.status not in ('pending', 'running') or new.result is not null or new.settled_attempt is not null
       or new.settled_seq is not null or new.settled_by is not null
       or new.error is not null or new.dead_lettered_at is not null or new.dead_letter_reason is not null
       or new.redrive_count <> 0 then
      raise exception using
        errcode = 'SE021',
        message = 'a new operation must start unsettled (pending or running, no result, no error)',
        detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'status', new.status)::text,
        hint = 'Create operations with settle.claim.';
    end if;
    -- The rules on the reservation lock's columns, which no UPDATE may change (_050_guard_lock).
    v_rule := case
      when not (octet_length(new.tenant) between 1 and settle_private._limit('tenant_bytes')) then 'tenant_length_in_range'
      when not (octet_length(new.key) between 1 and settle_private._limit('key_bytes')) then 'key_length_in_range'
      when not (octet_length(new.principal) between 1 and settle_private._limit('principal_bytes')) then 'principal_length_in_range'
      -- '^v1:[0-9a-f]{64}$' as a regex without the counted repetition (which PostgreSQL's regex
      -- engine expands into 64 states, built again on every match: ~10x the cost) and a length.
      when not (new.fingerprint ~ '^v1:[0-9a-f]+$' and octet_length(new.fingerprint) = 67) then 'fingerprint_is_versioned'
      when not (new.binding_generation >= 0) then 'binding_generation_not_negative'
      -- The rules below that a row starting unsettled (checked above) can break; the others
      -- (a terminal status, a result, a settlement, an error, a dead letter, a redrive count)
      -- hold trivially for it, so an INSERT does not set them up.
      when not (new.attempt >= 1 and new.attempt <= new.max_attempts) then 'attempt_within_budget'
      when not ((new.lease_token is null) = (new.lease_expires_at is null)) then 'lease_token_iff_lease_expiry'
      when not (new.lease_token is null or new.lease_token = new.attempt_token) then 'lease_is_the_current_attempts'
      when not (new.status <> 'pending' or new.lease_token is null) then 'pending_is_unleased'
      when not (new.status <> 'running' or new.lease_token is not null) then 'running_is_leased'
      when not ((new.claim_seq is null) = (new.claim_audit_id is null)
                and (new.claim_seq is null) = (new.claim_status_after is null)) then 'claim_log_complete'
    end;
    if v_rule is not null then
      perform settle_private._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
    end if;
    return new;
  else
    -- The rules of earlier states, behind one test that the settling UPDATE (running to
    -- completed, epochs unchanged) fails: a completed result, a move down the lattice, an
    -- attempt epoch or redrive generation going back.
    if old.status = 'completed' or (new.status < old.status) is not false
       or new.attempt < old.attempt or new.redrive_count < old.redrive_count then
      if old.status = 'completed' then
        if new.result is distinct from old.result or new.settled_attempt is distinct from old.settled_attempt
           or new.settled_at is distinct from old.settled_at or new.settled_seq is distinct from old.settled_seq
           or new.settled_audit_id is distinct from old.settled_audit_id
           or new.settled_status_before is distinct from old.settled_status_before
           or new.settled_reason is distinct from old.settled_reason or new.settled_by is distinct from old.settled_by then
          raise exception using
            errcode = 'SE022',
            message = 'the result of a completed operation is immutable',
            detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'settled_attempt', old.settled_attempt)::text,
            hint = 'A completed result is written once, with the move to completed.';
        end if;
      end if;

      -- A move down the lattice. settle.status is declared in lattice order, so only a move to a
      -- lower label can be one (NULL too: the NOT NULL constraint comes after this trigger);
      -- running to pending is not (both rank 1). The only permitted move down: settle.redrive
      -- re-opening a dead-lettered failure as a new redrive generation, and only when every
      -- attempt recorded a failure (attempts_exhausted). An operation where an attempt may have
      -- taken effect is never lowered below unknown, by redrive or anything else.
      if (new.status < old.status) is not false then
        v_redrive := old.status = 'failed' and old.dead_letter_reason = 'attempts_exhausted'
          and new.status = 'pending' and new.dead_lettered_at is null
          and new.redrive_count = old.redrive_count + 1;
        if v_redrive and settle_private._may_have_taken_effect(old.tenant, old.key, old.status, old.attempt) then
          v_redrive := false;
        end if;

        if settle_private._rank(new.status) < settle_private._rank(old.status) and not v_redrive then
          raise exception using
            errcode = 'SE021',
            message = format('status may not move down the lattice from %s to %s', old.status, new.status),
            detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'from', old.status, 'to', new.status)::text,
            hint = 'Statuses only move up: pending/running < unknown < conflict < failed < completed. Dead letters are re-opened with settle.redrive.';
        end if;
      end if;

      if new.attempt < old.attempt or new.redrive_count < old.redrive_count then
        raise exception using
          errcode = 'SE021',
          message = 'attempt epochs and redrive generations never go back',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'new_attempt', new.attempt)::text;
      end if;
    end if;
  end if;

  v_rule := case
    when not (new.attempt >= 1 and new.attempt <= new.max_attempts) then 'attempt_within_budget'
    when not ((new.lease_token is null) = (new.lease_expires_at is null)) then 'lease_token_iff_lease_expiry'
    when not (new.lease_token is null or new.lease_token = new.attempt_token) then 'lease_is_the_current_attempts'
    when not (new.status <> 'pending' or new.lease_token is null) then 'pending_is_unleased'
    when not (new.status <> 'running' or new.lease_token is not null) then 'running_is_leased'
    when not (new.status not in ('failed', 'completed') or new.lease_token is null) then 'terminal_is_unleased'
    when not ((new.status = 'completed') = (new.result is not null)) then 'completed_has_result'
    when not ((new.status = 'completed') = (new.settled_attempt is not null and new.settled_at is not null))
      then 'completed_has_settlement'
    when not (new.settled_attempt is null or new.settled_attempt between 1 and new.attempt) then 'settled_attempt_was_opened'
    when not ((new.settled_attempt is null) = (new.settled_seq is null) and (new.settled_seq is null) = (new.settled_audit_id is null)
              and (new.settled_seq is null) = (new.settled_reason is null)) then 'settlement_is_logged'
    when not (new.status <> 'failed' or new.error is not null) then 'failed_has_error'
    when not ((new.dead_lettered_at is null) = (new.dead_letter_reason is null)) then 'dead_letter_has_reason'
    when not (new.dead_lettered_at is null or new.lease_token is null) then 'dead_letter_is_unleased'
    when not (new.dead_letter_reason is null
              or (new.dead_letter_reason = 'attempts_exhausted' and new.status = 'failed')
              or (new.dead_letter_reason = 'needs_reconciliation' and new.status in ('unknown', 'conflict')))
      then 'dead_letter_reason_fits_status'
    when not (new.redrive_count >= 0) then 'redrive_count_not_negative'
  end;
  if v_rule is not null then
    perform settle_private._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
  end if;

  -- The settlement (settled_attempt set: completed, a row rule above): the login that settled it
  -- is the authenticated login, never the writer's word (assigned only when a writer passed
  -- something else, as at INSERT), and the settled attempt holds no other terminal observation
  -- (the attempt-scoped settlement lock: an attempt that failed or presented a mismatched lock,
  -- or whose success came too late, never settles; one that reported unknown may). The current
  -- attempt of a settling UPDATE has no record in the common case: the read finds nothing.
  if new.settled_attempt is not null and old.settled_attempt is null then
    if new.settled_by is distinct from session_user::text then
      new.settled_by := session_user::text;
    end if;
    if exists (select 1 from settle_private.attempts a
                where a.tenant = new.tenant and a.key = new.key and a.attempt = new.settled_attempt
                  and a.observation in ('conflict', 'failed', 'completed')) then
      raise exception using
        errcode = 'SE024',
        message = 'an attempt holds at most one terminal observation',
        detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'attempt', new.settled_attempt)::text,
        hint = 'Attempt-scoped settlement locks: an attempt that recorded another outcome never settles.';
    end if;
  end if;

  -- `failed` means a committed failure: no attempt may have taken effect (every attempt
  -- recorded a failure, and the operation never reached unknown or conflict). A final failure
  -- or a spent budget after an attempt that may have taken effect (it reported unknown,
  -- conflicted, or its lease lapsed without an observation) is a dead letter that needs
  -- reconciliation, never `failed`. It reads the attempts, so it is checked
  -- after the row rules, and only on a move to failed. (It was a trigger of its own,
  -- _995_guard_failure, with a WHEN clause: PostgreSQL 15 reads back and plans a trigger's WHEN
  -- clause for every UPDATE statement, which cost more than this test; docs/performance.md.)
  -- The one audited exception: an operator's resolution (settle.resolve, 00014) asserting with
  -- evidence that no effect happened, recognised by its audit row written in this very
  -- transaction.
  -- (An INSERT has returned above: this is an UPDATE.)
  if new.status = 'failed' and old.status <> 'failed' then
    if settle_private._may_have_taken_effect(new.tenant, new.key, old.status, old.attempt)
       and not settle_private._resolving_failed(new.tenant, new.key) then
      raise exception using
        errcode = 'SE021',
        message = 'status may move to failed only on a committed failure',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'from', old.status, 'to', new.status)::text,
        hint = 'An attempt may have taken effect: the operation stays unknown (or conflict) and is dead-lettered with reason needs_reconciliation.';
    end if;
  end if;

  -- The settlement feed (00013): a move into completed or failed, once every rule above has
  -- accepted the row, writes its feed event in the same statement, whoever the writer. Here
  -- rather than in a trigger of its own: one PL/pgSQL trigger call per settling UPDATE, not
  -- two (each call sets up its frame and expressions again in every transaction). A key has a
  -- second final outcome only after a failure (failed, then redriven or completed by a late
  -- success): only then is its previous event read, to keep the key's events in order
  -- (position_xid never below the previous event's). The waiters are read in the statement that
  -- writes the event.
  if new.status in ('completed', 'failed') and new.status is distinct from old.status then
    if old.status = 'failed' or new.redrive_count > 0 then
      select e.position_xid into v_previous from settle_private.feed_events e
       where e.tenant = new.tenant and e.key = new.key and e.status = 'failed'
       order by e.event_id desc limit 1;
    end if;
    insert into settle_private.feed_events
      (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt, result, error,
       dead_letter_reason, redrive_count, occurred_at)
    values (new.tenant, new.key, greatest(pg_current_xact_id(), v_previous), pg_current_xact_id(), hashtext(new.key),
            new.status, old.status, coalesce(new.settled_attempt, new.attempt), new.result, new.error,
            new.dead_letter_reason, new.redrive_count, new.updated_at)
    returning exists (select 1 from settle_private.feed_waiters w where w.until > now()) into v_wake;
    if v_wake then
      perform pg_notify('settle_feed', '');
    end if;
  end if;
  return new;
end
$$;

-- The reservation lock of an operation (tenant, key, request, its fingerprint, the
-- authorization binding, the creation time) never changes. Trigger _050_guard_lock fires only
-- for an UPDATE that names one of these columns in its SET list (BEFORE UPDATE OF ...): the
-- engine never does, so its UPDATEs do not pay for the comparisons. It still
-- compares, so an UPDATE that names a column without changing it (`set key = key`, a
-- logically replicated row that lists every column) passes. Which writer could change a
-- column without naming it: only a BEFORE UPDATE trigger that assigns NEW.<column>, and
-- creating one on settle_private needs the TRIGGER privilege or ownership, which can disable
-- every guard anyway (protocol §10: only the owner or a superuser can break the guards).
create function settle_private.tg_operations__guard_lock()
returns trigger
language plpgsql
as $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.fingerprint is distinct from old.fingerprint or new.request is distinct from old.request
     or new.principal is distinct from old.principal or new.scopes is distinct from old.scopes
     or new.binding_generation is distinct from old.binding_generation
     or new.created_at is distinct from old.created_at then
    raise exception using
      errcode = 'SE020',
      message = 'the reservation lock of an operation is immutable',
      detail = jsonb_build_object('tenant', old.tenant, 'key', old.key)::text,
      hint = 'Tenant, key, request, fingerprint and authorization binding are fixed at first claim; use a new key for a new intent.';
  end if;
  return new;
end
$$;

-- The current attempt of an operation (its number, token, worker and the log of its claim) never
-- changes while it is current: trigger _050_guard_attempt fires only for an UPDATE that names one
-- of these columns (as _050_guard_lock above; the settling UPDATE names none). A new attempt
-- epoch replaces them all, with a token of its own, and only once the record of the attempt it
-- supersedes is kept in settle_private.attempts (the history of every attempt stays whole).
-- Who made the new epoch's claim is the authenticated login, whatever the writer passes.
create function settle_private.tg_operations__guard_attempt()
returns trigger
language plpgsql
as $$
begin
  if new.attempt = old.attempt then
    if new.attempt_token is distinct from old.attempt_token or new.worker is distinct from old.worker
       or new.claimed_at is distinct from old.claimed_at or new.claimed_by is distinct from old.claimed_by
       or new.claim_seq is distinct from old.claim_seq or new.claim_audit_id is distinct from old.claim_audit_id
       or new.claim_status_before is distinct from old.claim_status_before
       or new.claim_status_after is distinct from old.claim_status_after then
      raise exception using
        errcode = 'SE024',
        message = 'the identity, end and log of an attempt are immutable',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
    end if;
  elsif new.attempt > old.attempt then
    if new.attempt_token = old.attempt_token
       or not exists (select 1 from settle_private.attempts a
                       where a.tenant = old.tenant and a.key = old.key and a.attempt = old.attempt
                         and a.lease_token = old.attempt_token) then
      raise exception using
        errcode = 'SE024',
        message = 'a new attempt epoch needs a token of its own and the record of the attempt it supersedes',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'new_attempt', new.attempt)::text,
        hint = 'Attempt epochs are opened by settle.claim.';
    end if;
    if new.claimed_by is distinct from session_user::text then
      new.claimed_by := session_user::text;
    end if;
  end if;
  return new;
end
$$;

-- The identity of an attempt and the log of its claim never change: trigger _050_guard_identity
-- fires only for an UPDATE that names one of these columns (as _050_guard_lock above).
create function settle_private.tg_attempts__guard_identity()
returns trigger
language plpgsql
as $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.claimed_by is distinct from old.claimed_by
     or new.attempt is distinct from old.attempt or new.lease_token is distinct from old.lease_token
     or new.worker is distinct from old.worker or new.claimed_at is distinct from old.claimed_at
     or new.claim_seq is distinct from old.claim_seq or new.claim_audit_id is distinct from old.claim_audit_id
     or new.claim_status_before is distinct from old.claim_status_before
     or new.claim_status_after is distinct from old.claim_status_after then
    raise exception using
      errcode = 'SE024',
      message = 'the identity, end and log of an attempt are immutable',
      detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
  end if;
  return new;
end
$$;

-- The guard of settle_private.attempts (trigger _100_guard_record), for INSERT and UPDATE. A
-- record is written for the current attempt of its operation, as the operation holds it (its
-- token, worker, claim log and login: a record keeps what the operation showed, never the
-- writer's word), and then holds the attempt's end and its one terminal observation. As in the
-- operations guard, what only an earlier state can break is tested in a branch a first
-- observation never enters, and the identity columns are the business of _050_guard_identity.
create function settle_private.tg_attempts__guard_record()
returns trigger
language plpgsql
as $$
declare
  v_rule text;
  v_op record;
begin
  if tg_op = 'UPDATE' then
    -- The rules of earlier states, behind one test that a first observation fails: an end, a
    -- terminal observation, a move down.
    if old.ended_at is not null or old.observation is not null then
      if old.ended_at is not null and (new.ended_at is distinct from old.ended_at
                                       or new.end_reason is distinct from old.end_reason) then
        raise exception using
          errcode = 'SE024',
          message = 'the identity, end and log of an attempt are immutable',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
      end if;

      -- conflict is terminal too: an attempt that presented a mismatched lock never settles.
      if old.observation in ('conflict', 'failed', 'completed') and (new.observation is distinct from old.observation
         or new.error is distinct from old.error or new.retryable is distinct from old.retryable
         or new.late_result is distinct from old.late_result or new.observed_at is distinct from old.observed_at) then
        raise exception using
          errcode = 'SE024',
          message = 'an attempt holds at most one terminal observation',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'observation', old.observation)::text,
          hint = 'Attempt-scoped settlement locks: a new outcome needs a new attempt epoch (settle.claim).';
      end if;

      if settle_private._rank(new.observation) < settle_private._rank(old.observation) then
        raise exception using
          errcode = 'SE021',
          message = format('an attempt observation may not move down from %s to %s', old.observation, new.observation),
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
      end if;
    end if;
  end if;

  v_rule := case
    when not (new.attempt >= 1) then 'attempt_is_positive'
    when not ((new.claim_seq is null) = (new.claim_audit_id is null)
              and (new.claim_seq is null) = (new.claim_status_after is null)) then 'claim_log_complete'
    when not (new.observation is null or new.observation in ('unknown', 'conflict', 'failed', 'completed'))
      then 'observation_is_an_outcome'
    when not ((new.observation is null) = (new.observed_at is null)) then 'observed_iff_observation'
    when not ((new.ended_at is null) = (new.end_reason is null)) then 'end_reason_iff_ended'
    when not (new.end_reason is null or new.end_reason in ('observed', 'lease_expired', 'settled_elsewhere', 'exhausted', 'binding_revoked'))
      then 'end_reason_is_known'
    when not (new.observation is distinct from 'failed' or (new.error is not null and new.retryable is not null))
      then 'failure_has_error'
    when not (new.late_result is null or new.observation = 'completed') then 'late_result_only_with_completion'
  end;
  if v_rule is not null then
    perform settle_private._raise_row_rule(v_rule, 'attempts', new.tenant, new.key);
  end if;

  -- The checks of a foreign key (00002), after the row rules as a foreign key's check comes
  -- after CHECK constraints, without a foreign key's row lock: a record belongs to an operation
  -- (attempts_belong_to_operation) and, when written, records its current attempt as it stands.
  -- Once written, the record of the attempt that settled the operation takes no observation:
  -- that attempt observed `completed` (the operation's settlement; settle.attempts shows it).
  if tg_op = 'INSERT' then
    select o.attempt, o.attempt_token, o.worker, o.claimed_at, o.claimed_by, o.claim_seq, o.claim_audit_id,
           o.claim_status_before, o.claim_status_after
      into v_op
      from settle_private.operations o
     where o.tenant = new.tenant and o.key = new.key;
    if not found then
      perform settle_private._raise_reference('attempts_belong_to_operation', new.tenant, new.key, new.attempt);
    end if;
    if v_op.attempt is distinct from new.attempt or v_op.attempt_token is distinct from new.lease_token
       or v_op.worker is distinct from new.worker or v_op.claimed_at is distinct from new.claimed_at
       or v_op.claimed_by is distinct from new.claimed_by or v_op.claim_seq is distinct from new.claim_seq
       or v_op.claim_audit_id is distinct from new.claim_audit_id
       or v_op.claim_status_before is distinct from new.claim_status_before
       or v_op.claim_status_after is distinct from new.claim_status_after then
      perform settle_private._raise_reference('attempts_record_the_current_attempt', new.tenant, new.key, new.attempt);
    end if;
  elsif new.observation is distinct from old.observation
        and exists (select 1 from settle_private.operations o
                     where o.tenant = new.tenant and o.key = new.key and o.settled_attempt = new.attempt) then
    raise exception using
      errcode = 'SE024',
      message = 'an attempt holds at most one terminal observation',
      detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'attempt', new.attempt, 'observation', 'completed')::text,
      hint = 'The attempt that settled the operation observed completed: a second success of it is a duplicate.';
  end if;
  return new;
end
$$;

create function settle_private.tg_audit_log__refuse_change()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using
    errcode = 'SE023',
    message = format('the audit log is append-only (%s refused)', tg_op),
    hint = 'Audit rows are removed only by settle.purge together with their operation.';
end
$$;

-- DELETE on the private tables is the privilege of settle.purge, which sets the
-- transaction-local flag settle.purging while it works. TRUNCATE is always refused.
create function settle_private.tg_any__refuse_delete()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if tg_op = 'DELETE' and current_setting('settle.purging', true) = 'on' then
    return old;
  end if;
  raise exception using
    errcode = 'SE025',
    message = format('%s on %I.%I is refused: only settle.purge deletes', tg_op, tg_table_schema, tg_table_name),
    hint = 'Use settle.purge(older_than => ...) for retention.';
end
$$;

-- ---------------------------------------------------------------------------------------
-- Row rules: what a single row of operations or attempts must satisfy, whoever writes it.
-- They have the names, SQLSTATE (23514 check_violation) and message of CHECK constraints,
-- are checked by the guard trigger of each table (_100_guard_insert, _100_guard_lattice,
-- _100_guard_record) after its own checks, as CHECK constraints are checked after BEFORE
-- triggers: one trigger call per written row, not two (a PL/pgSQL trigger call has a set-up
-- cost of its own, docs/performance.md). Why not CHECK constraints: PostgreSQL 15
-- reads back and plans every CHECK expression of a table again for each INSERT or UPDATE
-- statement (ExecRelCheck: stringToNode and ExecPrepareExpr per result relation), and the
-- engine writes these tables four times per operation from PL/pgSQL. Measured on a
-- claim + complete cycle: the 25 CHECK constraints took 41% of the engine's server CPU
-- (docs/performance.md); an expression in a PL/pgSQL trigger keeps its plan for the session.
-- A rule holds when its expression is true or NULL, exactly as a CHECK constraint.
-- ---------------------------------------------------------------------------------------

create function settle_private._raise_row_rule(rule text, relation text, tenant text, key text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using
    errcode = 'check_violation',
    constraint = rule,
    schema = 'settle_private',
    table = relation,
    message = format('new row for relation "%s" violates check constraint "%s"', relation, rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key)::text,
    hint = 'The row rules of settle_private tables are listed in docs/protocol.md; write through the settle API.';
end
$$;

-- The error of a failed reference check of the guards (00002): the SQLSTATE, constraint name
-- and message a foreign key would give.
create function settle_private._raise_reference(rule text, tenant text, key text, attempt integer)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using
    errcode = 'foreign_key_violation',
    constraint = rule,
    schema = 'settle_private',
    table = 'attempts',
    message = format('insert or update on table "attempts" violates foreign key constraint "%s"', rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key, 'attempt', attempt)::text,
    hint = case rule when 'attempts_belong_to_operation' then 'An attempt is opened by settle.claim on its operation.'
                else 'The record of an attempt is written from its operation''s current attempt, as the engine writes it (00006).' end;
end
$$;

create trigger _050_guard_lock before update of tenant, key, fingerprint, request, principal, scopes,
  binding_generation, created_at on settle_private.operations
  for each row execute function settle_private.tg_operations__guard_lock();
create trigger _060_guard_attempt before update of attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq,
  claim_audit_id, claim_status_before, claim_status_after on settle_private.operations
  for each row execute function settle_private.tg_operations__guard_attempt();
create trigger _100_guard_insert before insert on settle_private.operations
  for each row execute function settle_private.tg_operations__guard();
create trigger _100_guard_lattice before update on settle_private.operations
  for each row execute function settle_private.tg_operations__guard();
create trigger _900_refuse_delete before delete on settle_private.operations
  for each row execute function settle_private.tg_any__refuse_delete();
create trigger _900_refuse_truncate before truncate on settle_private.operations
  for each statement execute function settle_private.tg_any__refuse_delete();

create trigger _050_guard_identity before update of tenant, key, claimed_by, attempt, lease_token, worker,
  claimed_at, claim_seq, claim_audit_id, claim_status_before, claim_status_after on settle_private.attempts
  for each row execute function settle_private.tg_attempts__guard_identity();
create trigger _100_guard_record before insert or update on settle_private.attempts
  for each row execute function settle_private.tg_attempts__guard_record();
create trigger _900_refuse_delete before delete on settle_private.attempts
  for each row execute function settle_private.tg_any__refuse_delete();
create trigger _900_refuse_truncate before truncate on settle_private.attempts
  for each statement execute function settle_private.tg_any__refuse_delete();

create trigger _100_refuse_update before update on settle_private.audit_log
  for each row execute function settle_private.tg_audit_log__refuse_change();
create trigger _900_refuse_delete before delete on settle_private.audit_log
  for each row execute function settle_private.tg_any__refuse_delete();
create trigger _900_refuse_truncate before truncate on settle_private.audit_log
  for each statement execute function settle_private.tg_any__refuse_delete();

alter table settle_private.operations enable always trigger _050_guard_lock;
alter table settle_private.operations enable always trigger _060_guard_attempt;
alter table settle_private.operations enable always trigger _100_guard_insert;
alter table settle_private.operations enable always trigger _100_guard_lattice;
alter table settle_private.operations enable always trigger _900_refuse_delete;
alter table settle_private.operations enable always trigger _900_refuse_truncate;
alter table settle_private.attempts enable always trigger _050_guard_identity;
alter table settle_private.attempts enable always trigger _100_guard_record;
alter table settle_private.attempts enable always trigger _900_refuse_delete;
alter table settle_private.attempts enable always trigger _900_refuse_truncate;
create trigger _100_refuse_update before update on settle_private.admin_log
  for each row execute function settle_private.tg_audit_log__refuse_change();
create trigger _900_refuse_delete before delete on settle_private.admin_log
  for each row execute function settle_private.tg_any__refuse_delete();
create trigger _900_refuse_truncate before truncate on settle_private.admin_log
  for each statement execute function settle_private.tg_any__refuse_delete();
alter table settle_private.admin_log enable always trigger _100_refuse_update;
alter table settle_private.admin_log enable always trigger _900_refuse_delete;
alter table settle_private.admin_log enable always trigger _900_refuse_truncate;
create trigger _900_refuse_delete before delete on settle_private.audit_overflow
  for each row execute function settle_private.tg_any__refuse_delete();
create trigger _900_refuse_truncate before truncate on settle_private.audit_overflow
  for each statement execute function settle_private.tg_any__refuse_delete();
alter table settle_private.audit_overflow enable always trigger _900_refuse_delete;
alter table settle_private.audit_overflow enable always trigger _900_refuse_truncate;
alter table settle_private.audit_log enable always trigger _100_refuse_update;
alter table settle_private.audit_log enable always trigger _900_refuse_delete;
alter table settle_private.audit_log enable always trigger _900_refuse_truncate;

reset role;
