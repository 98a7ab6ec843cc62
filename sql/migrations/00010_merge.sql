-- 00010: the observation merge: settle.complete, settle.fail, settle.report_unknown.
--
-- Why: settlement is a locked monotonic merge, not last-write-wins. One attempt's observation
-- is merged into the canonical record only
--   * if the attempt's token is valid (else fenced, invalid_token);
--   * if it presents the reservation lock again (else conflict: a mismatched success moves the
--     status to conflict, never touches the result);
--   * once per attempt (the attempt-scoped settlement lock: a second, different terminal
--     observation is already_settled);
--   * upwards only: a matching success settles unless something already did (then it is kept
--     as a late_result on its attempt); failure and unknown of an attempt that no longer holds
--     the lease are fenced; unknown never lowers a status.
-- _observe is shared by the three public functions, which differ only in what they present.

set local role settle_owner;

create type settle.observation_result as (
  outcome text,
  reason text,
  status settle.status,
  attempt integer,
  settled_attempt integer,
  result jsonb,
  error jsonb,
  conflict_on text[],
  dead_lettered boolean,
  dead_letter_reason text
);
comment on type settle.observation_result is
  'Answer of settle.complete / fail / report_unknown. outcome: settled | recorded | duplicate | already_settled | fenced | conflict. status/result/error/dead_lettered/dead_letter_reason are the canonical state after the merge, disclosed only to the holder of a valid attempt token whose lock matched (NULL for conflict and invalid_token).';

-- An observation presenting a revoked generation: fenced (binding_revoked), nothing merged,
-- nothing disclosed; what it presented (fingerprint, binding, result or error, bounded) is
-- kept in the audit log as evidence.
create function settle_private._observation_revoked(
  kind text, op settle_private.operations, attempt integer, fingerprint text, principal text, scopes text[],
  binding_generation bigint, payload jsonb, below bigint, as_of timestamptz)
returns settle.observation_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_res settle.observation_result;
begin
  perform settle_private._audit(op.tenant, op.key, as_of, kind, 'fenced', attempt, op.status, op.status, null,
    jsonb_build_object('reason', 'binding_revoked', 'below_generation', below,
      'presented', settle_private._presented(fingerprint, principal, scopes, binding_generation,
                                             case kind when 'fail' then 'error' else 'result' end, payload)));
  v_res.outcome := 'fenced';
  v_res.reason := 'binding_revoked';
  return v_res;
end
$$;

create function settle_private._observe(
  kind text,
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  fingerprint text,
  principal text,
  scopes text[],
  binding_generation bigint,
  result jsonb,
  error jsonb,
  retryable boolean)
returns settle.observation_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_att settle_private.attempts;
  v_before settle.status;
  v_diff text[];
  v_current boolean;
  v_exhausted boolean;
  v_res settle.observation_result;
  v_floor bigint;
  v_seen record; -- verdict and op, as in settle.claim (00008)
  v_logged boolean := false;
  v_audit_id bigint;
  v_seq bigint;
  v_valid boolean;
begin
  if (settle_private._name_ok(_observe.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(_observe.key, settle_private._limit('key_bytes'))
      and _observe.attempt >= 1 and _observe.lease_token is not null
      and _observe.fingerprint ~ '^v[0-9]+:[0-9a-f]+$' and octet_length(_observe.fingerprint) - strpos(_observe.fingerprint, ':') = 64
      and settle_private._binding_ok(_observe.principal, _observe.scopes, _observe.binding_generation)
      and case kind
            when 'complete' then settle_private._json_ok(_observe.result, settle_private._limit('result_bytes'))
            when 'fail' then settle_private._json_ok(_observe.error, settle_private._limit('error_bytes'))
                          and _observe.retryable is not null
            else true end) is not true then
    perform settle_private._check_observation(kind, _observe.tenant, _observe.key, _observe.attempt,
      _observe.lease_token, _observe.fingerprint, _observe.principal, _observe.scopes,
      _observe.binding_generation, _observe.result, _observe.error, _observe.retryable);
  end if;

  -- One statement checks access (00007: the login role's tenant binding) and the presented
  -- token, and locks the operation row only when both pass: a refused caller never holds a row
  -- lock of a tenant it may not reach, and a caller without the named attempt's token (a
  -- guessed or stale token, a purged key) is answered from a plain read below, without waiting
  -- on the row or making the lease holder wait. An attempt's token never changes,
  -- so the snapshot this statement reads it from cannot be stale.
  -- (The token is read by a statement of its own: on Citus a function that reads a distributed
  -- table may not run inside a statement routed to the key's shard.)
  v_valid := settle_private._is_attempt_token(_observe.tenant, _observe.key, _observe.attempt, _observe.lease_token);
  with a as materialized (
    select case when exists (select 1 from settle_private.tenant_bindings r
                              where (r.role_oid = to_regrole(quote_ident(session_user::text))::oid or r.role_name = session_user::text)
                                and not (_observe.tenant = any (r.tenants))) then -1
                else 0 end as verdict,
           v_valid as valid
  )
  select a.verdict, a.valid, x.op into v_seen
    from a left join lateral (
      select o as op from settle_private.operations o
       where o.tenant = _observe.tenant and o.key = _observe.key and a.verdict >= 0 and a.valid
         for update) x on true;
  if v_seen.verdict < 0 then
    perform settle_private._refuse_tenant(_observe.tenant, _observe.key, kind);
  end if;
  v_op := v_seen.op;
  if not v_seen.valid or v_op.tenant is null then
    -- No such attempt or not its token: nothing is disclosed and nothing waits. Never claimed
    -- raises SE010; a purged key (a straggler) is an all-NULL row.
    v_op := settle_private._lock_operation(_observe.tenant, _observe.key, purged_ok => true, lock => false);
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, 'fenced', _observe.attempt,
      v_op.status, v_op.status, null, jsonb_build_object(
        'reason', case when v_op.tenant is null then 'operation_purged' else 'invalid_token' end,
        'presented', settle_private._presented(
        _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
        case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error))));
    v_res.outcome := 'fenced';
    v_res.reason := 'invalid_token';
    return v_res;
  end if;

  -- Locked. Everything is decided again from here with what committed while this call waited:
  -- the time (settled_at, a lapsed lease), the tenant binding and the
  -- revocation floor, the attempt's record, and the place of this call in the key's history (as
  -- settle_private._next_seq numbers it, 00006) for a settlement logged on the operation below.
  v_now := clock_timestamp();
  select case when exists (select 1 from settle_private.tenant_bindings b   -- settle_private._access (00007)
                            where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (_observe.tenant = any (b.tenants))) then -1
              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _observe.tenant and f.principal = _observe.principal), 0) end as verdict,
         (select a from settle_private.attempts a
           where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt) as att,
         coalesce(greatest(
           (select max(l.seq) from settle_private.audit_log l where l.tenant = _observe.tenant and l.key = _observe.key),
           (select max(a.claim_seq) from settle_private.attempts a
             where a.tenant = _observe.tenant and a.key = _observe.key)), 0) + 1 as seq
    into v_seen;
  v_floor := v_seen.verdict;
  if v_floor < 0 then
    perform settle_private._refuse_tenant(_observe.tenant, _observe.key, kind);
  end if;
  v_seq := greatest(v_seen.seq, v_op.claim_seq + 1, v_op.settled_seq + 1);
  -- The attempt as settle.attempts shows it: its record, or the operation's current attempt that
  -- has none yet (nothing ended or observed); the attempt that settled the operation observed
  -- completed (its observation is the operation's settlement, 00002).
  v_att := v_seen.att;
  if v_att.attempt is null then
    v_att.attempt := _observe.attempt;
    v_att.worker := v_op.worker;
  end if;
  if v_op.settled_attempt = _observe.attempt then
    v_att.observation := 'completed';
  end if;
  if v_floor > 0 or v_op.principal <> _observe.principal then
    -- An operation reserved under a revoked generation is converted at this touch.
    v_op := settle_private._revoke_on_touch(v_op, _observe.principal, v_floor, v_now);
  end if;
  if _observe.binding_generation < v_floor then
    -- A revoked generation settles nothing; what it presented is kept as evidence.
    return settle_private._observation_revoked(kind, v_op, _observe.attempt, _observe.fingerprint,
      _observe.principal, _observe.scopes, _observe.binding_generation,
      coalesce(_observe.result, _observe.error), v_floor, v_now);
  end if;
  v_before := v_op.status;

  -- Binding gate: an observation that does not re-present the reserved lock never
  -- upgrades the canonical state and never sees or touches the result. A mismatched
  -- success flags the operation `conflict` (an effect may have run for another intent).
  -- Any mismatched observation is terminal for its attempt: the attempt
  -- records `conflict`, loses the lease if it held it, and is fenced from then on, so it can
  -- never settle later by presenting the right lock with what it did for another one.
  v_diff := settle_private._lock_diff(v_op, _observe.fingerprint, _observe.principal, _observe.scopes,
    _observe.binding_generation);
  if cardinality(v_diff) > 0 then
    v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;
    if v_current or (kind = 'complete' and settle_private._rank(v_op.status) < settle_private._rank('conflict')) then
      -- The mismatched observation ends its attempt: the lease goes with it.
      update settle_private.operations o
         set status = case when kind = 'complete' and settle_private._rank(v_op.status) < settle_private._rank('conflict')
                           then 'conflict'::settle.status
                           when v_current and v_op.status = 'running' then 'pending'::settle.status
                           else v_op.status end,
             lease_token = case when v_current then null else o.lease_token end,
             lease_expires_at = case when v_current then null else o.lease_expires_at end,
             updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
    end if;
    if settle_private._rank(v_att.observation) < settle_private._rank('conflict') then
      v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'conflict', v_now);
    end if;
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, 'conflict', _observe.attempt,
      v_before, v_op.status, v_att.worker, jsonb_build_object('conflict_on', v_diff, 'presented', settle_private._presented(
        _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
        case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error))));
    v_res.outcome := 'conflict';
    v_res.reason := 'lock_mismatch';
    v_res.conflict_on := settle_private._conflict_on(v_diff);
    return v_res;
  end if;

  v_res.attempt := v_op.attempt;
  v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;

  -- Attempt-scoped settlement lock: one terminal observation per attempt. An attempt that
  -- presented a mismatched lock (observation conflict) is fenced for good, whatever it
  -- presents now.
  if v_att.observation = 'conflict' then
    v_res.outcome := 'fenced';
    v_res.reason := 'attempt_conflicted';
  elsif v_att.observation in ('failed', 'completed') then
    if (kind = 'complete' and v_att.observation = 'completed'
          and (case when v_op.settled_attempt = _observe.attempt then v_op.result else v_att.late_result end) = _observe.result)
       or (kind = 'fail' and v_att.observation = 'failed' and v_att.error = _observe.error
          and v_att.retryable = _observe.retryable) then
      v_res.outcome := 'duplicate';
    else
      v_res.outcome := 'already_settled';
      v_res.reason := 'attempt_already_observed';
    end if;
  elsif kind = 'complete' then
    if v_op.status = 'completed' then
      -- A second success: the effect ran twice. Record it on its own attempt, never
      -- replace the result, never produce a second settlement.
      v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'completed', v_now,
        late_result => _observe.result);
      v_res.outcome := 'already_settled';
      v_res.reason := 'late_success';
    else
      -- Why this attempt settles: it holds the lease, or a later attempt exists but has not
      -- settled, or it is the latest attempt but its lease was released (it reported unknown,
      -- or its lapsed lease was expired) and nothing else settled.
      v_res.outcome := 'settled';
      v_res.reason := case
        when v_current then 'current_attempt'
        when v_op.attempt > _observe.attempt then 'superseded_attempt'
        else 'lease_released' end;
      -- The settlement, with its log (complete:settled in settle.audit_log: no audit row), on
      -- the operation row: that attempt's observation is the settlement (00002). (The identity is
      -- drawn first: Citus refuses a volatile function in an UPDATE of a distributed table.)
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      update settle_private.operations o
         set status = 'completed', result = _observe.result, settled_attempt = _observe.attempt,
             settled_at = v_now, settled_seq = v_seq, settled_audit_id = v_audit_id, settled_status_before = v_before,
             settled_reason = v_res.reason, settled_by = session_user, lease_token = null, lease_expires_at = null,
             dead_lettered_at = null, dead_letter_reason = null, error = null, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_logged := true;
      if v_op.attempt > _observe.attempt then
        -- A superseded attempt's success settled: the live attempt, if any, is over.
        v_writes := v_writes + settle_private._end_attempt(_observe.tenant, _observe.key, v_op.attempt, v_now, 'settled_elsewhere');
      end if;
    end if;
  elsif not v_current then
    -- Weaker observations of an attempt that no longer holds the lease are fenced.
    v_res.outcome := 'fenced';
    v_res.reason := settle_private._fence_reason(v_op, _observe.attempt);
  elsif kind = 'fail' then
    v_exhausted := not _observe.retryable or v_op.attempt >= v_op.max_attempts;
    v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'failed', v_now,
      error => _observe.error, retryable => _observe.retryable);
    if not _observe.retryable and not settle_private._may_have_taken_effect(v_op.tenant, v_op.key, v_op.status, v_op.attempt) then
      -- A final failure is a committed failure when no attempt may have taken effect.
      update settle_private.operations o
         set status = 'failed', error = _observe.error, lease_token = null, lease_expires_at = null,
             updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_res.outcome := 'settled';
      v_res.reason := 'final_failure';
    elsif v_exhausted then
      -- The last allowed attempt failed, or a final failure arrived after an earlier attempt may
      -- have taken effect (it reported unknown, conflicted, or lapsed): failed only
      -- if every attempt failed, else unknown and needs_reconciliation (see _dead_letter). A
      -- false `failed` would make the caller issue the effect again.
      v_op := settle_private._dead_letter(v_op, v_now, _observe.error);
      v_res.outcome := case when v_op.status = 'failed' then 'settled' else 'recorded' end;
      v_res.reason := v_op.dead_letter_reason;
    else
      update settle_private.operations o
         set status = case when v_op.status = 'running' then 'pending'::settle.status else v_op.status end,
             lease_token = null, lease_expires_at = null, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_res.outcome := 'recorded';
      v_res.reason := 'retryable_failure';
    end if;
  else
    -- report_unknown from the lease holder: the caller lost the response. Never a failure.
    v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'unknown', v_now);
    update settle_private.operations o
       set status = case when settle_private._rank(v_op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else v_op.status end,
           lease_token = null, lease_expires_at = null, updated_at = v_now
     where o.tenant = _observe.tenant and o.key = _observe.key
    returning * into v_op;
    if v_op.attempt >= v_op.max_attempts then
      -- The last allowed attempt lost its response: dead-lettered, needs reconciliation.
      v_op := settle_private._dead_letter(v_op, v_now, null);
    end if;
    v_res.outcome := 'recorded';
    v_res.reason := 'outcome_unknown';
  end if;

  -- Refused and fenced observations keep what they presented (bounded by _presented); the
  -- accepted ones are on the operation and attempt rows already.
  if not v_logged then
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, v_res.outcome, _observe.attempt,
      v_before, v_op.status, v_att.worker,
      case when v_res.outcome in ('fenced', 'already_settled') then
             jsonb_build_object('reason', v_res.reason, 'presented', settle_private._presented(
               _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
               case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error)))
           when v_res.reason is not null then jsonb_build_object('reason', v_res.reason) end);
  end if;

  return row(v_res.outcome, v_res.reason, v_op.status, v_op.attempt, v_op.settled_attempt, v_op.result,
             v_op.error, null, v_op.dead_lettered_at is not null, v_op.dead_letter_reason)::settle.observation_result;
end
$$;

-- complete(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation, result)
create function settle.complete(
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  fingerprint text,
  principal text,
  scopes text[],
  binding_generation bigint,
  result jsonb)
returns settle.observation_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_seen record;
  v_now timestamptz;
  v_audit_id bigint;
  v_res settle.observation_result;
begin
  -- The common success, the current lease holder settling an operation nothing else touched,
  -- is decided here in two statements and a few expressions; every other case (bad input, a
  -- refused login, an invalid or stale token, a mismatched lock, a floor, an attempt that
  -- already reported, a completed operation) is left to the general merge
  -- settle_private._observe, which decides it from scratch (docs/performance.md:
  -- PL/pgSQL sets up every expression it evaluates again in each transaction, so the number of
  -- expressions and statements per call is the cost). The fingerprint's format is not tested
  -- here: this path settles only when the fingerprint equals the stored one, which every writer
  -- wrote in the v1 format (row rule fingerprint_is_versioned, 00004) and none can change
  -- (_050_guard_lock); a malformed one matches nothing and gets its SE004 from _observe.
  -- Only printable ASCII names and at most one scope take this path (built-in functions only,
  -- see _name_ascii_ok, 00003); any other input is judged by _observe's full rules.
  if (settle_private._name_ascii_ok(complete.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ascii_ok(complete.key, settle_private._limit('key_bytes'))
      and complete.attempt >= 1 and complete.lease_token is not null
      and settle_private._binding_ascii_ok(complete.principal, complete.scopes, complete.binding_generation)
      and settle_private._json_ok(complete.result, settle_private._limit('result_bytes'))) is true then
    -- As the general merge's first statement: access (the login's tenant binding) and the
    -- presented token are checked before the row lock, and the row is locked only when both
    -- pass; here it is locked only when, on its latest version, this attempt holds the lease
    -- (the operation's current attempt and lease token are the presented ones), the presented
    -- lock matches the reservation and nothing settled. An attempt that holds the lease has
    -- reported nothing (every report releases it) and has no record in settle_private.attempts
    -- yet: nothing else is read. One plain locking read: the access test refers to no row of
    -- operations, so it is evaluated once, before the scan, as the scan's gate (a refused login
    -- reads and locks nothing), without the CTE and lateral join that cost three plan nodes.
    select o.status, o.claim_seq into v_seen
      from settle_private.operations o
     where o.tenant = complete.tenant and o.key = complete.key
       and o.attempt = complete.attempt and o.lease_token = complete.lease_token and o.status <> 'completed'
       and o.fingerprint = complete.fingerprint and o.principal = complete.principal
       and o.scopes = settle_private._normalize_scopes(complete.scopes)
       and o.binding_generation = complete.binding_generation
       and case when exists (select 1 from settle_private.tenant_bindings r
                              where (r.role_oid = to_regrole(quote_ident(session_user::text))::oid or r.role_name = session_user::text)
                                and not (complete.tenant = any (r.tenants))) then -1
                else 0 end >= 0
       for update;
    if found then
      -- Locked. As in the general merge, the access verdict and the place of this settlement in
      -- the key's history (after its audit rows and the claim of its current attempt, the
      -- latest event logged on a row of the key) are read after the lock, with what committed
      -- while this call waited; the settlement and its log are written in the same statement,
      -- only if no floor applies.
      v_now := clock_timestamp();
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      with s as materialized (
        select case when exists (select 1 from settle_private.tenant_bindings b   -- settle_private._access (00007)
                                  where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (complete.tenant = any (b.tenants))) then -1
                    else coalesce((select f.below_generation from settle_private.binding_floors f
                                    where f.tenant = complete.tenant and f.principal = complete.principal), 0) end as verdict,
               coalesce(greatest(
                 (select l.seq from settle_private.audit_log l where l.tenant = complete.tenant and l.key = complete.key
                   order by l.seq desc limit 1),
                 v_seen.claim_seq), 0) + 1 as seq
      ), op as (
        update settle_private.operations o
           set status = 'completed', result = complete.result, settled_attempt = complete.attempt,
               settled_at = v_now, settled_seq = s.seq, settled_audit_id = v_audit_id,
               settled_status_before = v_seen.status, settled_reason = 'current_attempt', settled_by = session_user,
               lease_token = null, lease_expires_at = null, dead_lettered_at = null,
               dead_letter_reason = null, error = null, updated_at = v_now
          from s
         where o.tenant = complete.tenant and o.key = complete.key and s.verdict = 0
        returning o.status, o.attempt, o.settled_attempt, o.result
      )
      select 'settled'::text, 'current_attempt'::text, op.status, op.attempt, op.settled_attempt, op.result,
             null::jsonb, null::text[], false, null::text
        into v_res
        from op;
      if found then
        return v_res;
      end if;
    end if;
  end if;
  return settle_private._observe('complete', complete.tenant, complete.key, complete.attempt, complete.lease_token, complete.fingerprint,
    complete.principal, complete.scopes, complete.binding_generation, complete.result, null, null);
end
$$;

comment on function settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb) is
  'Report that this attempt''s effect committed, with its result: the binding-gated, monotonic success merge.
Parameters: tenant, key, attempt, lease_token, fingerprint (all from the acquired claim), principal, scopes, binding_generation (the binding presented at claim), result jsonb (<= 1 MiB; immutable once settled).
Outcomes: settled (this success is the one settlement: status completed, result stored, reason current_attempt; superseded_attempt: a later attempt exists but nothing had settled, and this effect really happened; lease_released: this is the latest attempt, its lease was released (it reported unknown, or its lapsed lease was expired) and nothing had settled) | already_settled (reason late_success: the operation was already completed; this success is recorded on its attempt, the result is not replaced; reason attempt_already_observed: this attempt already reported another outcome) | duplicate (this attempt already reported this exact success) | conflict (this attempt''s own token, but fingerprint or binding differ: conflict_on; nothing disclosed; the canonical status moves to conflict if it was below it, the result is never touched; the attempt records conflict and loses its lease) | fenced (reason invalid_token: no such attempt or token; judged first, so a mismatched success with a token that is not the attempt''s changes nothing, no conflict; reason attempt_conflicted: this attempt presented a mismatched lock before and is fenced for good, whatever it presents now).
Canonical status, result and settled_attempt after the merge are returned except for conflict and invalid_token.
Also fenced with reason binding_revoked: the presented generation is below the floor of settle.revoke_binding; nothing merges, the presented result is kept in the audit log.
SQLSTATEs: SE001, SE002, SE003, SE004 (fingerprint format), SE005 (result), SE008; SE010 operation not found; SE013 tenant not granted to this login role.
Locking: the operation row (FOR UPDATE). Works inside the caller''s transaction: commit a same-database effect atomically with its settlement.
Idempotency: repeating the same call answers duplicate and changes nothing; every call leaves one row in settle.audit_log (a settling success: on its operation row).';

-- fail(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation, error, retryable)
create function settle.fail(
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  fingerprint text,
  principal text,
  -- The binding's defaults are claim's: a caller that claimed without scopes or a generation
  -- fails the same way. error must then have a default too: {} (a failure without details).
  scopes text[] default '{}',
  binding_generation bigint default 0,
  error jsonb default '{}',
  retryable boolean default true)
returns settle.observation_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  return settle_private._observe('fail', fail.tenant, fail.key, fail.attempt, fail.lease_token, fail.fingerprint,
    fail.principal, fail.scopes, fail.binding_generation, null, fail.error, fail.retryable);
end
$$;

comment on function settle.fail(text, text, integer, uuid, text, text, text[], bigint, jsonb, boolean) is
  'Report that this attempt''s effect definitely did not happen.
Parameters: as settle.complete, with error jsonb (<= 64 KiB; default {}, a failure without details) instead of result, and retryable (default true); scopes and binding_generation default as in settle.claim (''{}'', 0).
Outcomes: recorded (reason retryable_failure: the attempt is settled as failed, the lease is released and the next claim opens attempt N+1; the canonical status does not move) | settled (reason final_failure (retryable false, and no attempt may have taken effect): status failed with this error, a committed failure; reason attempts_exhausted: the last allowed attempt failed and every attempt recorded a failure: status failed, dead-lettered) | recorded (reason needs_reconciliation: a final failure, or the last allowed attempt failed, but the operation may have taken effect (its status is unknown or conflict, or an earlier attempt reported unknown, conflicted, or its lease lapsed without an observation): status at least unknown, never failed; dead-lettered with dead_letter_reason needs_reconciliation) | fenced (reason superseded / settled / lease_released / invalid_token: a failure of an attempt that no longer holds the lease never changes the canonical record) | duplicate | already_settled | conflict (as for complete, but the status never moves above running/pending; the attempt records conflict and loses its lease, and is fenced from then on: attempt_conflicted).
A later matching success still upgrades failed to completed (completed outranks failed).
Fenced binding_revoked as for complete.
SQLSTATEs: SE001-SE004, SE006 (error, retryable), SE008, SE010, SE013.
Locking: the operation row (FOR UPDATE). Idempotency: repeating answers duplicate.';

-- report_unknown(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation)
create function settle.report_unknown(
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  fingerprint text,
  principal text,
  scopes text[],
  binding_generation bigint)
returns settle.observation_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  return settle_private._observe('report_unknown', report_unknown.tenant, report_unknown.key, report_unknown.attempt,
    report_unknown.lease_token, report_unknown.fingerprint, report_unknown.principal, report_unknown.scopes,
    report_unknown.binding_generation, null, null, null);
end
$$;

comment on function settle.report_unknown(text, text, integer, uuid, text, text, text[], bigint) is
  'Report that this attempt lost the response of its effect: it may or may not have happened. Timeout means unknown, never failure.
Parameters: as settle.complete, without a result.
Outcomes: recorded (reason outcome_unknown: status becomes unknown unless already higher, the lease is released; a later success of this same attempt still settles; on the last allowed attempt the operation is also dead-lettered with dead_letter_reason needs_reconciliation: dead_lettered true in the answer) | fenced (the attempt no longer holds the lease: nothing changes) | already_settled (the attempt already reported a terminal outcome, e.g. success then timeout: completed is kept) | conflict | fenced invalid_token.
Fenced binding_revoked as for complete.
SQLSTATEs: SE001-SE004, SE008, SE010, SE013.
Locking: the operation row (FOR UPDATE). Idempotency: a repeated unknown is fenced (the lease is gone) and changes nothing.';

reset role;
