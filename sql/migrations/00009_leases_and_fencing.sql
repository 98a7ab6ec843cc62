-- 00009: leases and fencing: the heartbeat and the sweeper.
--
-- Why: an attempt may run its effect only while it holds the lease of the current attempt
-- epoch, judged by the database clock (clock_timestamp()), never the caller's. Fencing is the
-- other half: an attempt that no longer holds the lease (superseded, released, settled) is told
-- so by every call it makes (settle_private._fence_reason, 00006), and its weaker observations
-- change nothing (00010). settle_private._expire (00006) ends a lapsed lease; settle.claim
-- calls it to take over and settle.expire_leases sweeps; correctness never depends on the
-- sweeper running.

set local role settle_owner;

create type settle.heartbeat_result as (
  outcome text,
  reason text,
  status settle.status,
  lease_expires_at timestamptz
);
comment on type settle.heartbeat_result is
  'Answer of settle.heartbeat. outcome: extended | fenced (reason: invalid_token | superseded | settled | lease_released).';

create type settle.expire_result as (
  expired integer,
  dead_lettered integer
);
comment on type settle.expire_result is 'Answer of settle.expire_leases: leases expired and operations dead-lettered in this call.';

-- settle.heartbeat of an attempt whose reservation is revoked (`op` locked, op.binding_generation
-- below `below`): the operation is converted, the heartbeat fenced with reason binding_revoked.
-- NULL outcome when the token is not a valid attempt token (the caller answers invalid_token,
-- disclosing nothing about the revocation).
create function settle_private._heartbeat_revoked(op settle_private.operations, attempt integer, lease_token uuid,
  below bigint, as_of timestamptz)
returns settle.heartbeat_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
  v_res settle.heartbeat_result;
begin
  if not settle_private._is_attempt_token(op.tenant, op.key, attempt, lease_token) then
    return v_res;
  end if;
  v_op := settle_private._revoke_operation(op, below, as_of, null);
  perform settle_private._audit(op.tenant, op.key, as_of, 'heartbeat', 'fenced', attempt, v_op.status, v_op.status, null,
    jsonb_build_object('reason', 'binding_revoked', 'below_generation', below));
  v_res.outcome := 'fenced';
  v_res.reason := 'binding_revoked';
  return v_res;
end
$$;

-- heartbeat(tenant, key, attempt, lease_token, lease) -> extended | fenced
create function settle.heartbeat(
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  lease interval default '30 seconds')
returns settle.heartbeat_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_res settle.heartbeat_result;
  v_floor bigint;
  v_seen record;
  v_tenant_ok boolean;
  v_valid boolean;
begin
  if (settle_private._name_ok(heartbeat.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(heartbeat.key, settle_private._limit('key_bytes'))
      and heartbeat.attempt >= 1 and heartbeat.lease_token is not null
      and settle_private._lease_ok(heartbeat.lease)) is not true then
    perform settle_private._check_observation_args(heartbeat.tenant, heartbeat.key, heartbeat.attempt,
      heartbeat.lease_token);
    perform settle_private._check_lease(heartbeat.lease);
  end if;

  -- The tenant binding and the token are checked before the row lock: a caller without the
  -- named attempt's token never waits on the row, so it cannot hold the lease holder up by
  -- keeping its transaction open. An attempt's token never changes.
  -- The binding is read in its own statement: on Citus a function reading the bindings (a
  -- reference table) may not run inside a statement routed to the key's shard.
  -- The token likewise (it reads the key's operation and attempts in statements of its own).
  v_tenant_ok := settle_private._tenant_ok(heartbeat.tenant);
  v_valid := settle_private._is_attempt_token(heartbeat.tenant, heartbeat.key, heartbeat.attempt, heartbeat.lease_token);
  with a as materialized (
    select v_tenant_ok as tenant_ok, v_valid as valid
  )
  select a.tenant_ok, a.valid, x.op into v_seen
    from a left join lateral (
      select o as op from settle_private.operations o
       where o.tenant = heartbeat.tenant and o.key = heartbeat.key and a.tenant_ok and a.valid
         for update) x on true;
  if not v_seen.tenant_ok then
    perform settle_private._refuse_tenant(heartbeat.tenant, heartbeat.key, 'heartbeat');
  end if;
  if not v_seen.valid or (v_seen.op).tenant is null then
    -- (A valid token whose operation was purged while this call waited: a straggler too.)
    v_op := settle_private._lock_operation(heartbeat.tenant, heartbeat.key, purged_ok => true, lock => false);
    -- No such attempt or not its token (a purged key: a straggler): audited, nothing disclosed.
    v_writes := v_writes + settle_private._audit(heartbeat.tenant, heartbeat.key, v_now, 'heartbeat', 'fenced', heartbeat.attempt,
      v_op.status, v_op.status, null, jsonb_build_object(
        'reason', case when v_op.tenant is null then 'operation_purged' else 'invalid_token' end));
    v_res.outcome := 'fenced';
    v_res.reason := 'invalid_token';
    return v_res;
  end if;
  v_op := v_seen.op;

  -- Locked: decide again with what committed while this call waited. The new
  -- lease is measured from now, the moment of the decision, never from the call's start: a
  -- heartbeat that waited on the row never answers `extended` with an expiry in the past.
  v_now := clock_timestamp();
  if not settle_private._tenant_ok(heartbeat.tenant) then
    perform settle_private._refuse_tenant(heartbeat.tenant, heartbeat.key, 'heartbeat');
  end if;
  -- An attempt reserved under a revoked binding generation keeps no lease (00007).
  v_floor := settle_private._floor(heartbeat.tenant, v_op.principal);
  if v_op.binding_generation < v_floor then
    v_res := settle_private._heartbeat_revoked(v_op, heartbeat.attempt, heartbeat.lease_token, v_floor, v_now);
    if v_res.outcome is not null then
      return v_res;
    end if;
  end if;

  if v_op.lease_token is not null and v_op.attempt = heartbeat.attempt and v_op.lease_token = heartbeat.lease_token then
    -- The current attempt keeps its lease, even if it lapsed while nobody took over.
    update settle_private.operations o
       set lease_expires_at = settle_private._expiry(v_now, heartbeat.lease), updated_at = v_now
     where o.tenant = heartbeat.tenant and o.key = heartbeat.key;
    v_res.outcome := 'extended';
    v_res.status := v_op.status;
    v_res.lease_expires_at := settle_private._expiry(v_now, heartbeat.lease);
    return v_res;
  end if;

  -- A valid token of an attempt that no longer holds the lease: told why, audited.
  v_res.outcome := 'fenced';
  v_res.reason := settle_private._fence_reason(v_op, heartbeat.attempt);
  v_res.status := v_op.status;
  v_writes := v_writes + settle_private._audit(heartbeat.tenant, heartbeat.key, v_now, 'heartbeat', 'fenced', heartbeat.attempt,
    v_op.status, v_op.status, null, jsonb_build_object('reason', v_res.reason));
  return v_res;
end
$$;

comment on function settle.heartbeat(text, text, integer, uuid, interval) is
  'Extend the lease of the current attempt.
Parameters: tenant, key, attempt and lease_token as returned by settle.claim; lease interval (1 s - 1 day, default 30 s) from now, by the database clock.
Outcomes: extended (lease_expires_at) | fenced with reason invalid_token (no such attempt/token; nothing disclosed), superseded (a later attempt owns the operation), settled (the operation is completed or failed: stop working), lease_released (this attempt already reported, or its lease was expired by the sweeper).
A current attempt whose lease lapsed but was not yet taken over is extended.
Also fenced with reason binding_revoked: the attempt''s reservation is under a revoked binding generation (settle.revoke_binding); the operation moves to conflict.
SQLSTATEs: SE001, SE002, SE007, SE008 (bad arguments), SE010 (operation not found), SE013 (tenant not granted to this login role).
Locking: the operation row (FOR UPDATE), only for a caller presenting the attempt''s own token; an invalid token is answered from a plain read and never waits. The new lease is measured from the decision under the lock. Idempotency: repeating extends again; fenced calls change nothing but write an audit row.';

-- The sweeper's step for one operation found by its lock-free scan: lock the row without
-- waiting (a busy row is left for the next sweep), decide again under the lock, and end the
-- lease or dead-letter. Returns 0 (no longer due, or busy), 1 (expired) or 2 (dead-lettered).
-- It touches one operation's rows, found by (tenant, key): on Citus the sweeper's call of it is
-- delegated to the worker that holds the key (force_delegation, sql/citus/distribute.sql).
create function settle_private._expire_key(tenant text, key text, as_of timestamptz, actor text)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _expire_key.tenant and o.key = _expire_key.key
     and ((o.lease_token is not null and o.lease_expires_at <= _expire_key.as_of)
          or (o.lease_token is null and o.status in ('pending', 'unknown', 'conflict') and o.attempt >= o.max_attempts
              and o.dead_lettered_at is null))
   for update skip locked;
  if not found then
    return 0;
  end if;
  v_op := settle_private._expire(v_op, _expire_key.as_of, _expire_key.actor);
  return case when v_op.dead_lettered_at is not null then 2 else 1 end;
end
$$;

-- expire_leases(batch_size) -> (expired, dead_lettered)
create function settle.expire_leases(batch_size integer default 1000)
returns settle.expire_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  -- Arguments of the per-key call are plain values (variables): Citus refuses a forced
  -- delegation whose call carries an expression such as session_user.
  v_actor text := session_user::text;
  -- A login bound to tenants sweeps only their operations (docs/protocol.md §12).
  v_mine text[] := settle_private._visible_tenants();
  v_due record;
  v_done integer;
  v_res settle.expire_result := row(0, 0);
begin
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  -- A lock-free scan for candidates (on Citus a multi-shard read, where FOR UPDATE is not
  -- allowed), then one locked, re-checked step per key (settle_private._expire_key). The call
  -- is in the FROM form so that Citus can delegate it from inside this function.
  for v_due in
    select o.tenant, o.key from settle_private.operations o
     where ((o.lease_token is not null and o.lease_expires_at <= v_now)
        or (o.lease_token is null and o.status in ('pending', 'unknown', 'conflict') and o.attempt >= o.max_attempts
            and o.dead_lettered_at is null))
       and (v_mine is null or o.tenant = any (v_mine))
     order by o.lease_expires_at nulls last
     limit batch_size
  loop
    select r into v_done from settle_private._expire_key(v_due.tenant, v_due.key, v_now, v_actor) r;
    if v_done > 0 then
      v_res.expired := v_res.expired + 1;
    end if;
    if v_done = 2 then
      v_res.dead_lettered := v_res.dead_lettered + 1;
    end if;
  end loop;
  return v_res;
end
$$;

comment on function settle.expire_leases(integer) is
  'Maintenance: end lapsed leases (judged by the database clock) and dead-letter operations whose attempt budget is spent.
Parameters: batch_size (1-100000, default 1000) rows per call; call again while it returns a full batch.
Outcomes: (expired, dead_lettered) counts. Each expiry writes an audit row (event expire, outcome expired or dead_lettered).
Correctness never depends on it: settle.claim takes over a lapsed lease by itself.
SQLSTATEs: SE008. Locking: finds candidates without locks, then locks each one (FOR UPDATE SKIP LOCKED: never waits for a busy row, which the next call handles) and decides again under the lock; a candidate no longer due is left alone.
Idempotency: safe to run concurrently and repeatedly.';

reset role;
