-- 00003: the settlement API (schema settle) and its private helpers.
--
-- Why: the protocol of docs/protocol.md lives here, in one place, so every caller (the
-- TypeScript client, a DBA in psql, a pgbench script) gets the same answers:
--   * settle.claim records the reservation lock on first claim and opens attempt epochs
--     with fenced leases judged by the database clock;
--   * settle.complete / fail / report_unknown merge one attempt's observation into the
--     canonical record: binding-gated, monotonic, with one settlement per operation;
--   * settle.expire_leases, redrive and purge are maintenance, and correctness never
--     depends on them running.
-- Every API function is SECURITY DEFINER with a pinned search_path (pg_temp last) and
-- touches the rows of one (tenant, key) only, found through its arguments, so each call
-- can later be delegated to the shard that holds that key. Each call locks the operation
-- row first (FOR UPDATE), which serializes all writers of one operation without advisory
-- locks. Every outcome writes an audit row in the caller's transaction.

set local role settle_owner;

-- ---------------------------------------------------------------------------------------
-- Result types
-- ---------------------------------------------------------------------------------------

create type settle.claim_result as (
  outcome text,
  status settle.status,
  attempt integer,
  lease_token uuid,
  lease_expires_at timestamptz,
  retry_after_ms integer,
  fingerprint text,
  result jsonb,
  settled_attempt integer,
  error jsonb,
  dead_lettered boolean,
  conflict_on text[]
);
comment on type settle.claim_result is
  'Answer of settle.claim. outcome: acquired | in_progress | replay | failed | conflict. Columns that do not apply to an outcome are NULL; a conflict discloses only conflict_on.';

create type settle.observation_result as (
  outcome text,
  reason text,
  status settle.status,
  attempt integer,
  settled_attempt integer,
  result jsonb,
  error jsonb,
  conflict_on text[]
);
comment on type settle.observation_result is
  'Answer of settle.complete / fail / report_unknown. outcome: settled | recorded | duplicate | already_settled | fenced | conflict. status/result/error are the canonical state after the merge, disclosed only to the holder of a valid attempt token whose lock matched.';

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

-- ---------------------------------------------------------------------------------------
-- Private helpers
-- ---------------------------------------------------------------------------------------

create function settle_private._raise(code text, message text, detail jsonb, hint text default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using errcode = _raise.code, message = _raise.message,
    detail = coalesce(_raise.detail::text, ''), hint = coalesce(_raise.hint, '');
end
$$;

-- Blank means made only of white space or invisible formatting characters, named explicitly
-- so the answer does not depend on the database locale ([[:space:]] follows glibc, which
-- does not count U+00A0 NO-BREAK SPACE as space).
create function settle_private._is_blank(value text)
returns boolean
language sql
immutable
parallel safe
as $$
  select value ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]*$'
$$;

-- A tenant, key, principal, scope or worker name: present, not blank, within its byte
-- limit, no control characters, Unicode NFC (so visually identical keys are identical).
create function settle_private._check_name(value text, field text, max_bytes integer, code text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_problem text;
begin
  if value is null then
    v_problem := 'must not be null';
  elsif settle_private._is_blank(value) then
    v_problem := 'must not be empty or whitespace only';
  elsif octet_length(value) > max_bytes then
    v_problem := format('must be at most %s bytes (got %s)', max_bytes, octet_length(value));
  elsif value ~ '[[:cntrl:]]' then
    v_problem := 'must not contain control characters';
  elsif not value is nfc normalized then
    v_problem := 'must be in Unicode normalization form NFC';
  end if;
  if v_problem is not null then
    perform settle_private._raise(code, format('%s %s', field, v_problem),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'See the input limits in docs/sql-api.md.');
  end if;
end
$$;

create function settle_private._check_json(value jsonb, field text, max_bytes integer, code text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is null then
    perform settle_private._raise(code, format('%s must not be null', field),
      jsonb_build_object('field', field), 'Pass a JSON value (JSON null is ''null''::jsonb).');
  elsif not settle_private._json_ok(value, max_bytes) then
    perform settle_private._raise(code, format('%s must be at most %s bytes of JSON text', field, max_bytes),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'Store large payloads elsewhere and settle a reference to them.');
  end if;
end
$$;

create function settle_private._check_binding(principal text, scopes text[], binding_generation bigint)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_scope text;
begin
  perform settle_private._check_name(principal, 'principal', 255, 'SE003');
  if scopes is null or cardinality(scopes) > 64 or array_position(scopes, null) is not null then
    perform settle_private._raise('SE003', 'scopes must be a non-null array of at most 64 non-null scopes',
      jsonb_build_object('field', 'scopes', 'max_items', 64), 'Pass ''{}'' for no scopes.');
  end if;
  foreach v_scope in array scopes loop
    perform settle_private._check_name(v_scope, 'scope', 128, 'SE003');
  end loop;
  if binding_generation is null or binding_generation < 0 then
    perform settle_private._raise('SE003', 'binding_generation must be a non-negative integer',
      jsonb_build_object('field', 'binding_generation'),
      'Use your token epoch, session version or delegation revision.');
  end if;
end
$$;

create function settle_private._check_observation_args(tenant text, key text, attempt integer, lease_token uuid)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_name(tenant, 'tenant', 64, 'SE001');
  perform settle_private._check_name(key, 'key', 255, 'SE002');
  if attempt is null or attempt < 1 then
    perform settle_private._raise('SE008', 'attempt must be a positive attempt epoch',
      jsonb_build_object('field', 'attempt'), 'Pass the attempt returned by settle.claim.');
  end if;
  if lease_token is null then
    perform settle_private._raise('SE008', 'lease_token must not be null',
      jsonb_build_object('field', 'lease_token'), 'Pass the lease_token returned by settle.claim.');
  end if;
end
$$;

-- Fast-path validity predicates. They are inlinable SQL, so the API functions evaluate them
-- as plain expressions (no query per check); only when one fails do the _check_* functions
-- above run, to raise the precise typed error.
create function settle_private._name_ok(value text, max_bytes integer)
returns boolean
language sql
immutable
parallel safe
as $$
  select octet_length(value) <= max_bytes
     and value !~ '[[:cntrl:]]'
     and not settle_private._is_blank(value)
     and value is nfc normalized
$$;

-- The limit is on the JSON text, but a value whose binary form is 8 times the limit (far
-- beyond any jsonb-to-text ratio) is refused without rendering it: a 250 MiB request must
-- not cost gigabytes of backend memory just to be measured. STABLE, not IMMUTABLE, because
-- pg_column_size is: the planner inlines a SQL function only when its body is no more
-- volatile than declared, and a call it cannot inline is parsed and planned again in every
-- transaction (fmgr_sql): about 60 us per claim or complete (pg_stat_user_functions, perf).
create function settle_private._json_ok(value jsonb, max_bytes integer)
returns boolean
language sql
stable
parallel safe
as $$
  select case when pg_column_size(value) > 8 * max_bytes then false
              else octet_length(value::text) <= max_bytes end
$$;

create function settle_private._scopes_ok(scopes text[])
returns boolean
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
  v_scope text;
begin
  foreach v_scope in array scopes loop
    if settle_private._name_ok(v_scope, 128) is not true then
      return false;
    end if;
  end loop;
  return true;
end
$$;

create function settle_private._binding_ok(principal text, scopes text[], binding_generation bigint)
returns boolean
language sql
immutable
parallel safe
as $$
  select settle_private._name_ok(principal, 255)
     and binding_generation >= 0
     and scopes is not null
     and cardinality(scopes) <= 64
     and (cardinality(scopes) = 0 or settle_private._scopes_ok(scopes))
$$;

-- Slow path of settle.claim's validation: raises the precise error for the first bad argument.
create function settle_private._check_claim_args(
  tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint,
  lease interval, worker text, max_attempts integer)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_name(tenant, 'tenant', 64, 'SE001');
  perform settle_private._check_name(key, 'key', 255, 'SE002');
  perform settle_private._check_binding(principal, scopes, binding_generation);
  perform settle_private._check_json(request, 'request', 65536, 'SE004');
  if lease is null or lease < interval '1 second' or lease > interval '1 day' then
    perform settle_private._raise('SE007', 'lease must be between 1 second and 1 day',
      jsonb_build_object('field', 'lease', 'min', '1 second', 'max', '1 day'),
      'Renew long work with settle.heartbeat instead of a long lease.');
  end if;
  if worker is not null then
    perform settle_private._check_name(worker, 'worker', 128, 'SE008');
  end if;
  if max_attempts is null or max_attempts not between 1 and 1000 then
    perform settle_private._raise('SE008', 'max_attempts must be between 1 and 1000',
      jsonb_build_object('field', 'max_attempts'), null);
  end if;
end
$$;

-- Slow path of the observation functions' validation.
create function settle_private._check_observation(
  kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text,
  principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_observation_args(tenant, key, attempt, lease_token);
  if fingerprint is null or fingerprint !~ '^v[0-9]+:[0-9a-f]{64}$' then
    perform settle_private._raise('SE004', 'fingerprint must be the value returned by settle.claim',
      jsonb_build_object('field', 'fingerprint'), 'Pass the fingerprint from the acquired claim; never compute it.');
  end if;
  perform settle_private._check_binding(principal, scopes, binding_generation);
  if kind = 'complete' then
    perform settle_private._check_json(result, 'result', 1048576, 'SE005');
  elsif kind = 'fail' then
    perform settle_private._check_json(error, 'error', 65536, 'SE006');
    if retryable is null then
      perform settle_private._raise('SE006', 'retryable must be true or false',
        jsonb_build_object('field', 'retryable'), null);
    end if;
  end if;
end
$$;

create function settle_private._normalize_scopes(scopes text[])
returns text[]
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  if cardinality(scopes) < 2 then
    return scopes;
  end if;
  return array(select distinct s collate "C" from unnest(scopes) as s order by 1);
end
$$;

-- Slow path of the canonical JSON form: jsonb's own text rendering, with every number
-- rendered without trailing fractional zeros (10.50 and 10.5 are the same amount).
create function settle_private._canonical_json_slow(value jsonb)
returns text
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  case jsonb_typeof(value)
    when 'object' then
      return '{' || coalesce((
        select string_agg(to_jsonb(e.k)::text || ': ' || settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_each(value) with ordinality as e(k, v, n)), '') || '}';
    when 'array' then
      return '[' || coalesce((
        select string_agg(settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_array_elements(value) with ordinality as e(v, n)), '') || ']';
    when 'number' then
      return trim_scale(value::numeric)::text;
    else
      return value::text;
  end case;
end
$$;

create function settle_private._canonical_json(value jsonb)
returns text
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
  v_text text := value::text;
begin
  -- Without a '.', jsonb's rendering is already canonical (keys sorted, one space after
  -- ':' and ',', exponents expanded); only fractional numbers need the slow path.
  if position('.' in v_text) = 0 then
    return v_text;
  end if;
  return settle_private._canonical_json_slow(value);
end
$$;

create function settle_private._audit(
  tenant text, key text, at timestamptz, event text, outcome text, attempt integer,
  status_before settle.status, status_after settle.status, actor text, detail jsonb)
returns void
language sql
as $$
  insert into settle_private.audit_log
    (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
  values (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
$$;

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

-- Ends the lapsed lease of `op` (judged against `now`) and dead-letters the operation if
-- its attempt budget is spent. Caller holds the row lock. Returns the updated row.
create function settle_private._expire(op settle_private.operations, as_of timestamptz, actor text)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations := op;
  v_exhausted boolean := op.attempt >= op.max_attempts;
begin
  if v_op.lease_token is not null then
    update settle_private.attempts a
       set ended_at = as_of, end_reason = case when v_exhausted then 'exhausted' else 'lease_expired' end
     where a.tenant = op.tenant and a.key = op.key and a.attempt = op.attempt and a.ended_at is null;
  end if;
  if v_exhausted then
    update settle_private.operations o
       set status = 'failed', lease_token = null, lease_expires_at = null, dead_lettered_at = as_of,
           error = jsonb_build_object('code', 'attempts_exhausted', 'attempts', op.attempt,
                                      'last_status', op.status::text),
           updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  else
    update settle_private.operations o
       set status = case when op.status = 'running' then 'pending'::settle.status else op.status end,
           lease_token = null, lease_expires_at = null, updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  end if;
  perform settle_private._audit(op.tenant, op.key, as_of, 'expire',
    case when v_exhausted then 'dead_lettered' else 'expired' end, op.attempt, op.status, v_op.status, actor,
    jsonb_build_object('lease_expires_at', op.lease_expires_at));
  return v_op;
end
$$;

-- ---------------------------------------------------------------------------------------
-- settle.status_rank
-- ---------------------------------------------------------------------------------------

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
-- settle.fingerprint
-- ---------------------------------------------------------------------------------------

-- fingerprint(request) -> 'v1:<sha256 hex>' of the canonical JSON form of request.
-- STABLE because convert_to is (see _json_ok): declared so, it is inlined into claim's
-- expression instead of parsed and planned on every call. Its result depends on nothing but
-- request (the database encoding is UTF8, enforced by SE030).
create function settle_private._fingerprint(request jsonb)
returns text
language sql
stable
strict
parallel safe
as $$
  select 'v1:' || encode(sha256(convert_to(settle_private._canonical_json(request), 'UTF8')), 'hex')
$$;

create function settle.fingerprint(request jsonb)
returns text
language sql
immutable
strict
parallel safe
security definer
set search_path = pg_catalog, pg_temp
as $$
  select settle_private._fingerprint(request)
$$;

comment on function settle.fingerprint(jsonb) is
  'Request fingerprint, algorithm v1: ''v1:'' || hex(sha256(canonical JSON text)).
Parameters: request jsonb (the effect-defining fields).
Canonical form: PostgreSQL jsonb text rendering (keys de-duplicated and sorted, fixed spacing) with numbers printed without trailing fractional zeros, so {"b":1,"a":10.50} and {"a":10.5,"b":1} share a fingerprint.
Outcomes: text; NULL for NULL input.
Locking: none. Idempotency: pure (IMMUTABLE). settle.claim computes it once, at first claim; clients never compute it.';

-- ---------------------------------------------------------------------------------------
-- settle.claim
-- ---------------------------------------------------------------------------------------

-- claim(tenant, key, request, principal, scopes, binding_generation, lease, worker, max_attempts)
-- Reserve (tenant, key) on first call, or join it: acquired | in_progress | replay | failed | conflict.
create function settle.claim(
  tenant text,
  key text,
  request jsonb,
  principal text,
  scopes text[] default '{}',
  binding_generation bigint default 0,
  lease interval default '30 seconds',
  worker text default null,
  max_attempts integer default 5)
returns settle.claim_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_fp text;
  v_token uuid;
  v_op settle_private.operations;
  v_before settle.status;
  v_diff text[];
  v_locked boolean := false;
  v_fresh boolean;
  v_detail jsonb;
  v_audit_attempt integer;
  v_res settle.claim_result;
begin
  if (settle_private._name_ok(claim.tenant, 64) and settle_private._name_ok(claim.key, 255)
      and settle_private._binding_ok(claim.principal, claim.scopes, claim.binding_generation)
      and settle_private._json_ok(claim.request, 65536)
      and claim.lease between interval '1 second' and interval '1 day'
      and (claim.worker is null or settle_private._name_ok(claim.worker, 128))
      and claim.max_attempts between 1 and 1000) is not true then
    perform settle_private._check_claim_args(claim.tenant, claim.key, claim.request, claim.principal,
      claim.scopes, claim.binding_generation, claim.lease, claim.worker, claim.max_attempts);
  end if;

  v_fp := settle_private._fingerprint(claim.request);
  v_token := gen_random_uuid();

  -- Most claims of an existing key (replays, retries, duplicates) are decided on this plain
  -- read; only a missing key tries the insert.
  select * into v_op from settle_private.operations o
   where o.tenant = claim.tenant and o.key = claim.key;
  v_fresh := found;

  if not v_fresh then
    -- First claim: the reservation lock and attempt 1. Two sessions racing on a new key: the
    -- loser waits here for the winner to commit, then joins below.
    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, status, attempt,
       max_attempts, lease_token, lease_expires_at, created_at, updated_at)
    values
      (claim.tenant, claim.key, v_fp, claim.request, claim.principal,
       settle_private._normalize_scopes(claim.scopes), claim.binding_generation, 'running', 1,
       claim.max_attempts, v_token, v_now + claim.lease, v_now, v_now)
    on conflict on constraint operations_pkey do nothing
    returning * into v_op;
  end if;

  if not v_fresh and v_op.tenant is not null then
    insert into settle_private.attempts (tenant, key, attempt, lease_token, worker, claimed_at)
    values (claim.tenant, claim.key, 1, v_token, claim.worker, v_now);
    v_res := row('acquired', v_op.status, 1, v_token, v_op.lease_expires_at, null, v_fp,
                 null, null, null, null, null);
    v_audit_attempt := 1;
    v_detail := '{"reserved": true}';
  else
    -- Answers that change nothing (conflict, replay, in_progress, failed) are decided on a
    -- plain read: the lock is immutable, completed is absorbing, a live lease is live.
    -- Only a takeover or a new attempt locks the row, and then decides again.
    loop
      if v_locked then
        select * into v_op from settle_private.operations o
         where o.tenant = claim.tenant and o.key = claim.key
         for update;
      elsif not v_fresh then
        select * into v_op from settle_private.operations o
         where o.tenant = claim.tenant and o.key = claim.key;
      end if;
      v_fresh := false;
      if v_op.tenant is null then
        -- Purged by settle.purge since our insert: the key is free again.
        return settle.claim(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
          claim.binding_generation, claim.lease, claim.worker, claim.max_attempts);
      end if;
      v_before := v_op.status;

      v_diff := settle_private._lock_diff(v_op, v_fp, claim.principal, claim.scopes, claim.binding_generation);
      if cardinality(v_diff) > 0 then
        v_res := row('conflict', null, null, null, null, null, null, null, null, null, null, v_diff);
        v_detail := jsonb_build_object('conflict_on', v_diff);
        exit;
      end if;

      if v_op.status = 'completed' then
        v_res := row('replay', v_op.status, v_op.attempt, null, null, null, v_fp, v_op.result,
                     v_op.settled_attempt, null, null, null);
        v_audit_attempt := v_op.settled_attempt;
        exit;
      end if;

      if v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at > v_now then
        v_res := row('in_progress', v_op.status, v_op.attempt, null, v_op.lease_expires_at,
                     greatest(1, ceil(extract(epoch from (v_op.lease_expires_at - v_now)) * 1000))::integer,
                     v_fp, null, null, null, null, null);
        v_audit_attempt := v_op.attempt;
        exit;
      end if;

      if v_op.status <> 'failed' and not v_locked then
        v_locked := true;
        continue;
      end if;

      -- Locked from here on. A lapsed lease is taken over without waiting for
      -- settle.expire_leases; a spent attempt budget dead-letters the operation.
      if v_op.status <> 'failed' and (v_op.lease_token is not null or v_op.attempt >= v_op.max_attempts) then
        v_op := settle_private._expire(v_op, v_now, claim.worker);
      end if;

      if v_op.status = 'failed' then
        v_res := row('failed', v_op.status, v_op.attempt, null, null, null, v_fp, null, null, v_op.error,
                     v_op.dead_lettered_at is not null, null);
        v_audit_attempt := v_op.attempt;
        exit;
      end if;

      update settle_private.operations o
         set attempt = v_op.attempt + 1,
             status = case when v_op.status = 'pending' then 'running'::settle.status else v_op.status end,
             lease_token = v_token, lease_expires_at = v_now + claim.lease, updated_at = v_now
       where o.tenant = claim.tenant and o.key = claim.key
      returning * into v_op;
      insert into settle_private.attempts (tenant, key, attempt, lease_token, worker, claimed_at)
      values (claim.tenant, claim.key, v_op.attempt, v_token, claim.worker, v_now);
      v_res := row('acquired', v_op.status, v_op.attempt, v_token, v_op.lease_expires_at, null, v_fp,
                   null, null, null, null, null);
      v_audit_attempt := v_op.attempt;
      exit;
    end loop;
  end if;

  -- Inline rather than through a helper: this is the hot path.
  insert into settle_private.audit_log
    (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
  values
    (claim.tenant, claim.key, v_now, 'claim', v_res.outcome, v_audit_attempt, v_before,
     coalesce(v_op.status, v_before), claim.worker, v_detail);
  return v_res;
end
$$;

comment on function settle.claim(text, text, jsonb, text, text[], bigint, interval, text, integer) is
  'Reserve an operation on first call, or join it: the claim phase of locked reservation.
Parameters: tenant (1-64 bytes), key (1-255 bytes; both NFC, no control characters, not blank), request jsonb (effect-defining fields, <= 64 KiB), principal (1-255 bytes), scopes text[] (<= 64, order and duplicates ignored), binding_generation bigint >= 0 (token epoch / session version), lease interval (1 s - 1 day, default 30 s), worker (optional, <= 128 bytes), max_attempts (1-1000, default 5; fixed at first claim).
Outcomes (exactly one row, also when sessions race on a new key): acquired (attempt N+1 opened: attempt, lease_token, lease_expires_at, fingerprint) | in_progress (a live lease is held: attempt, lease_expires_at, retry_after_ms) | replay (completed: result, settled_attempt) | failed (final failure or dead-lettered: error, dead_lettered) | conflict (request or binding differ from the reservation: conflict_on lists request/principal/scopes/binding_generation; nothing stored is disclosed, nothing executes).
SQLSTATEs: SE001 tenant, SE002 key, SE003 binding, SE004 request, SE007 lease, SE008 worker/max_attempts.
Locking: answers that change nothing (conflict, replay, in_progress, failed) come from a plain read; a new key is inserted; a takeover or a new attempt locks the operation row (FOR UPDATE) and decides again. A lapsed lease is taken over in place.
Idempotency: retrying with the same request and binding joins the same operation; every call writes one audit row.';

-- ---------------------------------------------------------------------------------------
-- settle.heartbeat
-- ---------------------------------------------------------------------------------------

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
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_valid boolean;
  v_res settle.heartbeat_result;
begin
  if (settle_private._name_ok(heartbeat.tenant, 64) and settle_private._name_ok(heartbeat.key, 255)
      and heartbeat.attempt >= 1 and heartbeat.lease_token is not null) is not true then
    perform settle_private._check_observation_args(heartbeat.tenant, heartbeat.key, heartbeat.attempt,
      heartbeat.lease_token);
  end if;
  if heartbeat.lease is null or heartbeat.lease < interval '1 second' or heartbeat.lease > interval '1 day' then
    perform settle_private._raise('SE007', 'lease must be between 1 second and 1 day',
      jsonb_build_object('field', 'lease'), null);
  end if;

  select * into v_op from settle_private.operations o
   where o.tenant = heartbeat.tenant and o.key = heartbeat.key
   for update;
  if not found then
    perform settle_private._raise('SE010', 'operation not found',
      jsonb_build_object('tenant', heartbeat.tenant, 'key', heartbeat.key), 'Claim it first with settle.claim.');
  end if;

  if v_op.lease_token is not null and v_op.attempt = heartbeat.attempt and v_op.lease_token = heartbeat.lease_token then
    -- The current attempt keeps its lease, even if it lapsed while nobody took over.
    update settle_private.operations o
       set lease_expires_at = v_now + heartbeat.lease, updated_at = v_now
     where o.tenant = heartbeat.tenant and o.key = heartbeat.key;
    v_res.outcome := 'extended';
    v_res.status := v_op.status;
    v_res.lease_expires_at := v_now + heartbeat.lease;
    return v_res;
  end if;

  select exists (select 1 from settle_private.attempts a
                  where a.tenant = heartbeat.tenant and a.key = heartbeat.key
                    and a.attempt = heartbeat.attempt and a.lease_token = heartbeat.lease_token)
    into v_valid;
  v_res.outcome := 'fenced';
  v_res.reason := case
    when not v_valid then 'invalid_token'
    when v_op.status in ('completed', 'failed') then 'settled'
    when v_op.attempt > heartbeat.attempt then 'superseded'
    else 'lease_released' end;
  if v_valid then
    v_res.status := v_op.status;
  end if;
  perform settle_private._audit(heartbeat.tenant, heartbeat.key, v_now, 'heartbeat', 'fenced', heartbeat.attempt,
    v_op.status, v_op.status, null, jsonb_build_object('reason', v_res.reason));
  return v_res;
end
$$;

comment on function settle.heartbeat(text, text, integer, uuid, interval) is
  'Extend the lease of the current attempt.
Parameters: tenant, key, attempt and lease_token as returned by settle.claim; lease interval (1 s - 1 day, default 30 s) from now, by the database clock.
Outcomes: extended (lease_expires_at) | fenced with reason invalid_token (no such attempt/token; nothing disclosed), superseded (a later attempt owns the operation), settled (the operation is completed or failed: stop working), lease_released (this attempt already reported, or its lease was expired by the sweeper).
A current attempt whose lease lapsed but was not yet taken over is extended.
SQLSTATEs: SE001, SE002, SE007, SE008 (bad arguments), SE010 (operation not found).
Locking: the operation row (FOR UPDATE). Idempotency: repeating extends again; fenced calls change nothing but write an audit row.';

-- ---------------------------------------------------------------------------------------
-- Observation merge (shared by complete, fail and report_unknown)
-- ---------------------------------------------------------------------------------------

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
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_att settle_private.attempts;
  v_before settle.status;
  v_diff text[];
  v_current boolean;
  v_exhausted boolean;
  v_res settle.observation_result;
begin
  if (settle_private._name_ok(_observe.tenant, 64) and settle_private._name_ok(_observe.key, 255)
      and _observe.attempt >= 1 and _observe.lease_token is not null
      and _observe.fingerprint ~ '^v[0-9]+:[0-9a-f]{64}$'
      and settle_private._binding_ok(_observe.principal, _observe.scopes, _observe.binding_generation)
      and case kind
            when 'complete' then settle_private._json_ok(_observe.result, 1048576)
            when 'fail' then settle_private._json_ok(_observe.error, 65536) and _observe.retryable is not null
            else true end) is not true then
    perform settle_private._check_observation(kind, _observe.tenant, _observe.key, _observe.attempt,
      _observe.lease_token, _observe.fingerprint, _observe.principal, _observe.scopes,
      _observe.binding_generation, _observe.result, _observe.error, _observe.retryable);
  end if;

  select * into v_op from settle_private.operations o
   where o.tenant = _observe.tenant and o.key = _observe.key
   for update;
  if not found then
    perform settle_private._raise('SE010', 'operation not found',
      jsonb_build_object('tenant', _observe.tenant, 'key', _observe.key), 'Claim it first with settle.claim.');
  end if;
  v_before := v_op.status;

  select * into v_att from settle_private.attempts a
   where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
  if not found or v_att.lease_token <> _observe.lease_token then
    insert into settle_private.audit_log
      (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
    values
      (_observe.tenant, _observe.key, v_now, kind, 'fenced', _observe.attempt, v_before, v_before, null,
       '{"reason": "invalid_token"}');
    v_res.outcome := 'fenced';
    v_res.reason := 'invalid_token';
    return v_res;
  end if;

  -- Binding gate: an observation that does not re-present the reserved lock never
  -- upgrades the canonical state and never sees or touches the result. A mismatched
  -- success flags the operation `conflict` (an effect may have run for another intent).
  v_diff := settle_private._lock_diff(v_op, _observe.fingerprint, _observe.principal, _observe.scopes,
    _observe.binding_generation);
  if cardinality(v_diff) > 0 then
    v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;
    if kind = 'complete' and (v_current or settle_private._rank(v_op.status) < settle_private._rank('conflict')) then
      -- The mismatched success ends its attempt: the lease goes with it.
      update settle_private.operations o
         set status = case when settle_private._rank(v_op.status) < settle_private._rank('conflict')
                           then 'conflict'::settle.status else v_op.status end,
             lease_token = case when v_current then null else o.lease_token end,
             lease_expires_at = case when v_current then null else o.lease_expires_at end,
             updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
    end if;
    if kind = 'complete' and settle_private._rank(v_att.observation) < settle_private._rank('conflict') then
      update settle_private.attempts a
         set observation = 'conflict', observed_at = v_now,
             ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
       where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
    end if;
    insert into settle_private.audit_log
      (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
    values
      (_observe.tenant, _observe.key, v_now, kind, 'conflict', _observe.attempt, v_before, v_op.status,
       v_att.worker, jsonb_build_object('conflict_on', v_diff));
    v_res.outcome := 'conflict';
    v_res.reason := 'lock_mismatch';
    v_res.conflict_on := v_diff;
    return v_res;
  end if;

  v_res.attempt := v_op.attempt;
  v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;

  -- Attempt-scoped settlement lock: one terminal observation per attempt.
  if v_att.observation in ('failed', 'completed') then
    if (kind = 'complete' and v_att.observation = 'completed'
          and (case when v_att.settled then v_op.result else v_att.late_result end) = _observe.result)
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
      update settle_private.attempts a
         set observation = 'completed', observed_at = v_now, late_result = _observe.result,
             ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
       where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
      v_res.outcome := 'already_settled';
      v_res.reason := 'late_success';
    else
      update settle_private.operations o
         set status = 'completed', result = _observe.result, settled_attempt = _observe.attempt,
             settled_at = v_now, lease_token = null, lease_expires_at = null, dead_lettered_at = null,
             error = null, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      update settle_private.attempts a
         set observation = 'completed', observed_at = v_now, settled = true,
             ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
       where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
      if v_op.attempt > _observe.attempt then
        -- A superseded attempt's success settled: the live attempt, if any, is over.
        update settle_private.attempts a
           set ended_at = v_now, end_reason = 'settled_elsewhere'
         where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = v_op.attempt
           and a.ended_at is null;
      end if;
      v_res.outcome := 'settled';
      -- Why this attempt still settles: it holds the lease, or a later attempt exists but has
      -- not settled, or it is the latest attempt but its lease was released (it reported
      -- unknown, or its lapsed lease was expired) and nothing else settled.
      v_res.reason := case
        when v_current then 'current_attempt'
        when v_op.attempt > _observe.attempt then 'superseded_attempt'
        else 'lease_released' end;
    end if;
  elsif not v_current then
    -- Weaker observations of an attempt that no longer holds the lease are fenced.
    v_res.outcome := 'fenced';
    v_res.reason := case
      when v_op.status in ('completed', 'failed') then 'settled'
      when v_op.attempt > _observe.attempt then 'superseded'
      else 'lease_released' end;
  elsif kind = 'fail' then
    v_exhausted := not _observe.retryable or v_op.attempt >= v_op.max_attempts;
    update settle_private.attempts a
       set observation = 'failed', observed_at = v_now, error = _observe.error, retryable = _observe.retryable,
           ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
     where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
    if v_exhausted then
      update settle_private.operations o
         set status = 'failed', error = _observe.error, lease_token = null, lease_expires_at = null,
             dead_lettered_at = case when _observe.retryable then v_now end, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_res.outcome := 'settled';
      v_res.reason := case when _observe.retryable then 'attempts_exhausted' else 'final_failure' end;
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
    update settle_private.attempts a
       set observation = 'unknown', observed_at = v_now,
           ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
     where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt;
    update settle_private.operations o
       set status = case when settle_private._rank(v_op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else v_op.status end,
           lease_token = null, lease_expires_at = null, updated_at = v_now
     where o.tenant = _observe.tenant and o.key = _observe.key
    returning * into v_op;
    v_res.outcome := 'recorded';
    v_res.reason := 'outcome_unknown';
  end if;

  -- Inline rather than through settle_private._audit: this is the hot path.
  insert into settle_private.audit_log
    (tenant, key, at, event, outcome, attempt, status_before, status_after, actor, detail)
  values
    (_observe.tenant, _observe.key, v_now, kind, v_res.outcome, _observe.attempt, v_before, v_op.status,
     v_att.worker, case when v_res.reason is not null then jsonb_build_object('reason', v_res.reason) end);

  v_res.status := v_op.status;
  v_res.attempt := v_op.attempt;
  v_res.settled_attempt := v_op.settled_attempt;
  v_res.result := v_op.result;
  v_res.error := v_op.error;
  return v_res;
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
begin
  return settle_private._observe('complete', complete.tenant, complete.key, complete.attempt, complete.lease_token, complete.fingerprint,
    complete.principal, complete.scopes, complete.binding_generation, complete.result, null, null);
end
$$;

comment on function settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb) is
  'Report that this attempt''s effect committed, with its result: the binding-gated, monotonic success merge.
Parameters: tenant, key, attempt, lease_token, fingerprint (all from the acquired claim), principal, scopes, binding_generation (the binding presented at claim), result jsonb (<= 1 MiB; immutable once settled).
Outcomes: settled (this success is the one settlement: status completed, result stored, reason current_attempt; superseded_attempt: a later attempt exists but nothing had settled, and this effect really happened; lease_released: this is the latest attempt, its lease was released (it reported unknown, or its lapsed lease was expired) and nothing had settled) | already_settled (reason late_success: the operation was already completed; this success is recorded on its attempt, the result is not replaced; reason attempt_already_observed: this attempt already reported another outcome) | duplicate (this attempt already reported this exact success) | conflict (fingerprint or binding differ: conflict_on; nothing disclosed; the canonical status moves to conflict if it was below it, the result is never touched) | fenced (reason invalid_token: no such attempt or token).
Canonical status, result and settled_attempt after the merge are returned except for conflict and invalid_token.
SQLSTATEs: SE001, SE002, SE003, SE004 (fingerprint format), SE005 (result), SE008; SE010 operation not found.
Locking: the operation row (FOR UPDATE). Works inside the caller''s transaction: commit a same-database effect atomically with its settlement.
Idempotency: repeating the same call answers duplicate and changes nothing; every call writes one audit row.';

-- fail(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation, error, retryable)
create function settle.fail(
  tenant text,
  key text,
  attempt integer,
  lease_token uuid,
  fingerprint text,
  principal text,
  scopes text[],
  binding_generation bigint,
  error jsonb,
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
Parameters: as settle.complete, with error jsonb (<= 64 KiB) instead of result, and retryable (default true).
Outcomes: recorded (reason retryable_failure: the attempt is settled as failed, the lease is released and the next claim opens attempt N+1; the canonical status does not move) | settled (reason final_failure: status failed with this error; reason attempts_exhausted: the last allowed attempt failed, status failed and dead-lettered) | fenced (reason superseded / settled / lease_released / invalid_token: a failure of an attempt that no longer holds the lease never changes the canonical record) | duplicate | already_settled | conflict (as for complete, but the status never moves).
A later matching success still upgrades failed to completed (completed outranks failed).
SQLSTATEs: SE001-SE004, SE006 (error, retryable), SE008, SE010.
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
Outcomes: recorded (reason outcome_unknown: status becomes unknown unless already higher, the lease is released; a later success of this same attempt still settles) | fenced (the attempt no longer holds the lease: nothing changes) | already_settled (the attempt already reported a terminal outcome, e.g. success then timeout: completed is kept) | conflict | fenced invalid_token.
SQLSTATEs: SE001-SE004, SE008, SE010.
Locking: the operation row (FOR UPDATE). Idempotency: a repeated unknown is fenced (the lease is gone) and changes nothing.';

-- ---------------------------------------------------------------------------------------
-- settle.get and the maintenance API
-- ---------------------------------------------------------------------------------------

create view settle.operations as
select o.tenant, o.key, o.status, settle.status_rank(o.status) as status_rank, o.attempt, o.max_attempts,
       o.lease_token is not null and o.lease_expires_at > clock_timestamp() as in_flight,
       o.lease_expires_at, o.result, o.settled_attempt, o.settled_at, o.error, o.dead_lettered_at,
       o.redrive_count, o.fingerprint, o.principal, o.scopes, o.binding_generation, o.request,
       o.created_at, o.updated_at
  from settle_private.operations o;
comment on view settle.operations is
  'Canonical record of every operation (read-only). in_flight: a lease is held and has not lapsed by the database clock. The lease token itself is never shown.';

-- get(tenant, key) -> the canonical record, or no row
create function settle.get(tenant text, key text)
returns setof settle.operations
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
  select * from settle.operations v where v.tenant = get.tenant and v.key = get.key
$$;

comment on function settle.get(text, text) is
  'The canonical record of one operation, for support staff, DBAs and clients that re-read after a lost response.
Parameters: tenant, key.
Outcomes: one row of settle.operations, or no row when the operation does not exist (or was purged). Another tenant''s operation is never visible under your tenant.
SQLSTATEs: none. Locking: none (a snapshot read). Idempotency: read-only.';

-- expire_leases(batch_size) -> (expired, dead_lettered)
create function settle.expire_leases(batch_size integer default 1000)
returns settle.expire_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_res settle.expire_result := row(0, 0);
begin
  if batch_size is null or batch_size not between 1 and 100000 then
    perform settle_private._raise('SE008', 'batch_size must be between 1 and 100000',
      jsonb_build_object('field', 'batch_size'), null);
  end if;
  for v_op in
    select * from settle_private.operations o
     where (o.lease_token is not null and o.lease_expires_at <= v_now)
        or (o.lease_token is null and o.status in ('pending', 'unknown', 'conflict') and o.attempt >= o.max_attempts)
     order by o.lease_expires_at nulls last
     limit batch_size
     for update skip locked
  loop
    v_op := settle_private._expire(v_op, v_now, session_user::text);
    v_res.expired := v_res.expired + 1;
    if v_op.dead_lettered_at is not null then
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
SQLSTATEs: SE008. Locking: FOR UPDATE SKIP LOCKED on the operations it handles (never waits for busy rows).
Idempotency: safe to run concurrently and repeatedly.';

-- redrive(tenant, key, additional_attempts, request, reason) -> the re-opened record
create function settle.redrive(
  tenant text,
  key text,
  additional_attempts integer default 1,
  request jsonb default null,
  reason text default null)
returns setof settle.operations
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
begin
  perform settle_private._check_name(redrive.tenant, 'tenant', 64, 'SE001');
  perform settle_private._check_name(redrive.key, 'key', 255, 'SE002');
  if additional_attempts is null or additional_attempts not between 1 and 1000 then
    perform settle_private._raise('SE008', 'additional_attempts must be between 1 and 1000',
      jsonb_build_object('field', 'additional_attempts'), null);
  end if;
  if reason is not null and octet_length(reason) > 1024 then
    perform settle_private._raise('SE008', 'reason must be at most 1024 bytes',
      jsonb_build_object('field', 'reason'), null);
  end if;

  select * into v_op from settle_private.operations o
   where o.tenant = redrive.tenant and o.key = redrive.key
   for update;
  if not found then
    perform settle_private._raise('SE010', 'operation not found',
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key), null);
  end if;
  if redrive.request is not null and settle_private._fingerprint(redrive.request) <> v_op.fingerprint then
    perform settle_private._raise('SE012', 'redrive refused: the request differs from the reservation',
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key),
      'A redrive re-runs the reserved request; a changed intent needs a new key.');
  end if;
  if v_op.status <> 'failed' or v_op.dead_lettered_at is null then
    perform settle_private._raise('SE011', format('only dead-lettered operations can be redriven (status %s)', v_op.status),
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key, 'status', v_op.status,
                         'dead_lettered', v_op.dead_lettered_at is not null),
      'See settle.dead_letters.');
  end if;

  update settle_private.operations o
     set status = 'pending', dead_lettered_at = null, error = null, redrive_count = v_op.redrive_count + 1,
         max_attempts = v_op.attempt + redrive.additional_attempts, updated_at = v_now
   where o.tenant = redrive.tenant and o.key = redrive.key;
  perform settle_private._audit(redrive.tenant, redrive.key, v_now, 'redrive', 'redriven', v_op.attempt,
    v_op.status, 'pending', session_user::text,
    jsonb_build_object('additional_attempts', additional_attempts, 'reason', reason,
                       'previous_error', v_op.error, 'redrive_count', v_op.redrive_count + 1));
  return query select * from settle.operations v where v.tenant = redrive.tenant and v.key = redrive.key;
end
$$;

comment on function settle.redrive(text, text, integer, jsonb, text) is
  'Re-open a dead-lettered operation for new attempt epochs, keeping its key, fingerprint and binding.
Parameters: tenant, key; additional_attempts (1-1000, default 1) added to the spent budget; request (optional: if given, it must match the reservation, else SE012); reason (optional, <= 1024 bytes, kept in the audit row).
Outcomes: the re-opened record (status pending, redrive_count + 1). The lattice allows this one move down, only from a dead-lettered failure, and the audit row keeps the previous error.
SQLSTATEs: SE001, SE002, SE008, SE010 (not found), SE011 (not dead-lettered: also what a second, concurrent redrive gets), SE012 (request differs).
Locking: the operation row (FOR UPDATE): concurrent redrives never double-open.
Idempotency: not idempotent by design; a repeat answers SE011 once the first has re-opened the operation.';

-- purge(older_than, batch_size) -> operations purged
create function settle.purge(older_than interval, batch_size integer default 1000)
returns integer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_op record;
  v_count integer := 0;
  v_attempts integer;
  v_audit integer;
begin
  if older_than is null or older_than < interval '0' then
    perform settle_private._raise('SE008', 'older_than must be a non-negative interval',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  if batch_size is null or batch_size not between 1 and 100000 then
    perform settle_private._raise('SE008', 'batch_size must be between 1 and 100000',
      jsonb_build_object('field', 'batch_size'), null);
  end if;

  perform set_config('settle.purging', 'on', true);
  for v_op in
    select o.tenant, o.key, o.status, o.attempt, o.updated_at from settle_private.operations o
     where o.status in ('completed', 'failed') and o.updated_at < v_now - older_than
     order by o.updated_at
     limit batch_size
     for update skip locked
  loop
    delete from settle_private.attempts a where a.tenant = v_op.tenant and a.key = v_op.key;
    get diagnostics v_attempts = row_count;
    delete from settle_private.audit_log l where l.tenant = v_op.tenant and l.key = v_op.key;
    get diagnostics v_audit = row_count;
    delete from settle_private.operations o where o.tenant = v_op.tenant and o.key = v_op.key;
    perform settle_private._audit(v_op.tenant, v_op.key, v_now, 'purge', 'purged', v_op.attempt,
      v_op.status, null, session_user::text,
      jsonb_build_object('attempts', v_attempts, 'audit_rows', v_audit, 'last_updated_at', v_op.updated_at));
    v_count := v_count + 1;
  end loop;
  perform set_config('settle.purging', 'off', true);
  return v_count;
end
$$;

comment on function settle.purge(interval, integer) is
  'Retention: the only path that deletes. Removes terminal (completed or failed) operations last updated before now - older_than, with their attempts and audit rows, leaving one tombstone audit row (event purge) per purged key.
Parameters: older_than interval (>= 0), batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations purged. A purged key can be claimed again as a new operation.
SQLSTATEs: SE008. Locking: FOR UPDATE SKIP LOCKED (busy rows wait for the next call).
Idempotency: safe to repeat and to run concurrently.';

-- ---------------------------------------------------------------------------------------
-- Read-only views for DBAs
-- ---------------------------------------------------------------------------------------

create view settle.attempts as
select a.tenant, a.key, a.attempt, a.worker, a.claimed_at, a.ended_at, a.end_reason, a.observation,
       a.observed_at, a.retryable, a.error, a.late_result, a.settled
  from settle_private.attempts a;
comment on view settle.attempts is
  'Every attempt epoch with its attempt-scoped settlement: observation (unknown/conflict/failed/completed), whether it was THE settlement (settled), and any late success (late_result). Lease tokens are never shown.';

create view settle.audit_log as
select l.tenant, l.key, l.audit_id, l.at, l.event, l.outcome, l.attempt, l.status_before, l.status_after,
       l.actor, l.detail
  from settle_private.audit_log l;
comment on view settle.audit_log is
  'Append-only audit trail: one row per claim, fenced heartbeat, observation, expiry, redrive and purge, ordered per key by audit_id. Transitions are serialized by the operation row lock, so their rows are in commit order; claims answered without a change (replay, in_progress, conflict, failed) take no row lock and may interleave with a concurrent transition.';

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
       count(*) filter (where o.lease_token is not null and o.lease_expires_at > clock_timestamp()) as in_flight,
       count(*) filter (where o.lease_token is not null and o.lease_expires_at <= clock_timestamp()) as lapsed_leases,
       coalesce(sum(o.attempt), 0) as attempts
  from settle_private.operations o
 group by o.tenant;
comment on view settle.stats is
  'Per-tenant counts by status, dead letters, live and lapsed leases, and attempts opened.';

-- ---------------------------------------------------------------------------------------
-- Grants
-- ---------------------------------------------------------------------------------------

revoke all on all functions in schema settle from public;
revoke all on all functions in schema settle_private from public;

grant execute on function
  settle.claim(text, text, jsonb, text, text[], bigint, interval, text, integer),
  settle.heartbeat(text, text, integer, uuid, interval),
  settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb),
  settle.fail(text, text, integer, uuid, text, text, text[], bigint, jsonb, boolean),
  settle.report_unknown(text, text, integer, uuid, text, text, text[], bigint),
  settle.get(text, text),
  settle.fingerprint(jsonb),
  settle.status_rank(settle.status)
  to settle_app;

grant execute on function settle.get(text, text), settle.fingerprint(jsonb), settle.status_rank(settle.status)
  to settle_readonly, settle_admin;
grant execute on function
  settle.expire_leases(integer),
  settle.redrive(text, text, integer, jsonb, text),
  settle.purge(interval, integer)
  to settle_admin;

grant select on settle.operations, settle.attempts, settle.audit_log, settle.dead_letters,
  settle.settlements, settle.stats to settle_readonly, settle_admin;

reset role;
