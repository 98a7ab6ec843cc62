-- 00016: batches: settle.claim_many and settle.complete_many.
--
-- Why: a caller that settles many keys of one tenant at once (a payout run, an import, a queue
-- worker that takes 100 jobs) pays per key one commit, one round trip and one WAL flush with the
-- single-key calls; the engine is bound by flushing its WAL (docs/performance.md), so one call and
-- one commit for many keys is the lever. A batch changes the cost, never the answers:
--   * every key has exactly the single-key answer and guarantees: its own attempt, lease and
--     fencing token, fingerprint, binding check, lattice, audit, feed event, tenant binding and
--     revocation floor. A batch is its single calls made at one instant
--     (test/engine/batch-property.test.ts holds the answers equal);
--   * the common batches are decided set-based, a statement for all keys rather than a call per
--     key: claim_many of new keys (_claim_new_keys) and complete_many by the lease holders
--     (_complete_holders), each taken only when access is granted, the generation not revoked and
--     every key distinct, and each checking under its locks that every key is the common case.
--     Anything else (a key that exists, was inserted meanwhile, waited longer than a first claim
--     may, or is not its lease holder's plain success) rolls the set-based try back to its
--     subtransaction and the batch is decided key by key by the single-key calls themselves
--     (settle.claim, settle.complete), inside the batch's transaction
--     (test/engine/batch-set-based.test.ts);
--   * the keys are visited in one fixed order, (key COLLATE "C", ordinal), so every row lock and
--     every wait on another session's uncommitted insert of a key is taken in that order: two
--     batches over overlapping keys never deadlock, whatever order their callers listed the keys
--     in (one waits for the other at the first key they share). A single-key call holds one lock;
--   * a key listed twice is decided twice, in list order, as a second caller would be: a second
--     claim of a key the batch acquired answers in_progress, a second identical complete answers
--     duplicate;
--   * the input is checked whole before any key is decided (nothing is written for a bad batch):
--     the shape of the arrays (SE060-SE063), then every element by the single-key rules, whose
--     SQLSTATE the batch raises with the element's ordinal added to DETAIL;
--   * the answers come back one row per element, in the caller's order (ordinal, 1-based).
-- The batch functions are not delegated on Citus (their keys live on many shards): there each
-- key's call is routed to its shard from the coordinator, in the same key order.

set local role settle_owner;

create type settle.claim_many_result as (
  ordinal integer,
  key text,
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
  conflict_on text[],
  reason text,
  dead_letter_reason text
);
comment on type settle.claim_many_result is
  'One element of settle.claim_many: its ordinal (1-based position in keys) and key, then exactly the columns settle.claim answers for that key (settle.claim_result).';

create type settle.complete_many_result as (
  ordinal integer,
  key text,
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
comment on type settle.complete_many_result is
  'One element of settle.complete_many: its ordinal (1-based position in keys) and key, then exactly the columns settle.complete answers for that key (settle.observation_result).';

-- The shape of a batch: `keys` one-dimensional, indexed from 1, without NULL, 1..max_batch_keys
-- elements; every other array (`names`, `arrays` as text) of the same shape and length. Raises
-- SE061 (empty), SE060 (too many), SE062 (a shape or length that differs), SE063 (a NULL array
-- or element). The arrays come as anyarray's text form would lose NULLs, so each is passed with
-- its own facts: cardinality, dimensions, lower bound, and the ordinal of its first NULL.
create function settle_private._check_batch_shape(names text[], cardinalities integer[], dims integer[],
  lowers integer[], first_nulls bigint[])
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_n integer := cardinalities[1];
  v_max constant integer := settle_private._limit('max_batch_keys');
begin
  for i in 1 .. cardinality(names) loop
    if cardinalities[i] is null then
      perform settle_private._raise('SE063', format('%s must not be NULL', names[i]),
        jsonb_build_object('field', names[i]), 'Pass an array with one element per key.');
    end if;
  end loop;
  if v_n = 0 then
    perform settle_private._raise('SE061', 'a batch needs at least one key',
      jsonb_build_object('field', names[1]), 'Call with one or more keys (or skip the call: an empty batch settles nothing).');
  end if;
  if v_n > v_max then
    perform settle_private._raise('SE060', format('a batch holds at most %s keys (got %s)', v_max, v_n),
      jsonb_build_object('field', names[1], 'max_keys', v_max, 'keys', v_n),
      'Split the keys into batches of at most max_batch_keys.');
  end if;
  for i in 1 .. cardinality(names) loop
    if dims[i] <> 1 or lowers[i] <> 1 or cardinalities[i] <> v_n then
      perform settle_private._raise('SE062', format('%s must be a one-dimensional array indexed from 1 with one element per key (%s keys, got %s)',
        names[i], v_n, cardinalities[i]),
        jsonb_build_object('field', names[i], 'keys', v_n, 'elements', cardinalities[i], 'dimensions', dims[i], 'lower_bound', lowers[i]),
        'Pass the per-key arrays in the order of keys, one element each.');
    end if;
  end loop;
  for i in 1 .. cardinality(names) loop
    if first_nulls[i] is not null then
      perform settle_private._raise('SE063', format('%s[%s] must not be NULL', names[i], first_nulls[i]),
        jsonb_build_object('field', names[i], 'ordinal', first_nulls[i]), null);
    end if;
  end loop;
end
$$;

-- The JSON text of a batch's requests or results together (`bytes`, each element measured by
-- settle_private._json_bytes) is at most max_batch_bytes (16 MiB): one call holds that much
-- in memory at once, a few times over, and keeps its rows locked while it writes it. SE064 else.
create function settle_private._check_batch_bytes(field text, bytes bigint)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_max constant integer := settle_private._limit('max_batch_bytes');
begin
  if bytes > v_max then
    perform settle_private._raise('SE064', format('a batch''s %s hold at most %s bytes of JSON text together (got %s)',
      field, v_max, bytes),
      jsonb_build_object('field', field, 'max_bytes', v_max, 'bytes', bytes),
      'Split the keys into smaller batches: each call''s ' || field || ' at most max_batch_bytes together.');
  end if;
end
$$;

-- Raise the single-key check's error for one element of a batch, with the element's ordinal
-- added to its DETAIL. Called only for an element the fast predicates refused; `kind` names the
-- single-key check (claim: _check_claim_args; complete: _check_observation).
create function settle_private._check_batch_element(kind text, ordinal bigint, tenant text, key text, request jsonb,
  principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer,
  attempt integer, lease_token uuid, fingerprint text, result jsonb)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_state text;
  v_message text;
  v_detail text;
  v_hint text;
begin
  begin
    if kind = 'claim' then
      perform settle_private._check_claim_args(tenant, key, request, principal, scopes, binding_generation, lease,
        worker, max_attempts);
    else
      perform settle_private._check_observation('complete', tenant, key, attempt, lease_token, fingerprint,
        principal, scopes, binding_generation, result, null, null);
    end if;
  exception when others then
    get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail,
      v_hint = pg_exception_hint;
    raise exception using errcode = v_state, message = format('element %s: %s', ordinal, v_message),
      detail = (coalesce(nullif(v_detail, '')::jsonb, '{}'::jsonb) || jsonb_build_object('ordinal', ordinal))::text,
      hint = coalesce(v_hint, '');
  end;
end
$$;

-- Whether the batches may take their set-based paths: not on Citus, where the keys of a batch
-- live on many shards and each key's single call is routed to its own (the key-by-key path).
-- PL/pgSQL, without a SET clause (reached only from the batch functions, which pin the path):
-- its read is planned once per session. A LANGUAGE SQL function with a subquery is not
-- inlined, and was parsed and planned again at every call (66 us, pg_stat_user_functions).
create function settle_private._set_based_batches()
returns boolean
language plpgsql
stable
as $$
begin
  return not exists (select 1 from pg_catalog.pg_extension e where e.extname = 'citus');
end
$$;

-- The set-based claim of a batch of new keys (settle.claim_many, whose caller checked the input,
-- access, the floor, and that every key is distinct and had no operation). Every key gets what
-- its single first claim writes and answers: the operation (running, attempt 1, its own lease
-- token, the fingerprint of its request), attempt 1 as the log of the claim (its place in the
-- key's history after any audit row of the key, as settle.claim numbers it) and `acquired`.
-- The operations are inserted in the batch's fixed order (key COLLATE "C"), so a wait behind
-- another session's uncommitted insert of a key comes in the order the key-by-key path takes.
-- Every lease is measured from the batch's instant, its start. Raises SE099, which the caller
-- catches and then decides key by key after the rollback to its block, when a key was inserted
-- by another session since the caller's read. An insert of a key that another session inserted
-- and has not committed waits for it, as settle.claim's does; when that session rolls back, the
-- batch goes on and decides with what committed meanwhile, as settle.claim does after such a
-- wait: access is judged again after every insert (a change sends the batch key by key, where
-- each claim answers it), and when the insert took more than a tenth of the lease, every lease is
-- measured again from the moment it returned (an UPDATE of the batch's operations, as
-- settle.claim's after a wait): no lease loses more than a tenth of its length to a wait or to
-- the batch's own work, and a batch that took less writes nothing more. Not a lock_timeout: that
-- also fires on the table's extension lock, which concurrent inserts wait for, and PostgreSQL can
-- report a lock timeout of one wait of a statement that then waits again as a cancel (57014,
-- "canceling statement due to user request"), which the caller must not catch (a
-- statement_timeout is one too).
create function settle_private._claim_new_keys(tenant text, keys text[], requests jsonb[], principal text,
  scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer)
returns setof settle.claim_many_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_expires timestamptz := settle_private._expiry(v_now, _claim_new_keys.lease);
  v_decided timestamptz;
  v_floor bigint;
  v_keys text[];
  v_tokens uuid[];
  v_fingerprints text[];
begin
  -- The operations, each with attempt 1 and the log of its claim, in the fixed order (each
  -- claim_audit_id drawn as settle.claim draws it, key after key; each claim placed in the key's
  -- history after any audit row of the key). An insert of a key that another session inserted
  -- and has not committed waits for that session, as settle.claim's does.
  with ins as (
    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    select _claim_new_keys.tenant, u.k, settle_private._fingerprint(u.r), u.r, _claim_new_keys.principal,
           settle_private._normalize_scopes(_claim_new_keys.scopes), _claim_new_keys.binding_generation,
           _claim_new_keys.max_attempts, v_now, 1, u.t, _claim_new_keys.worker, v_now, session_user,
           (select coalesce(max(l.seq), 0) + 1 from settle_private.audit_log l
             where l.tenant = _claim_new_keys.tenant and l.key = u.k),
           nextval('settle_private.audit_log_audit_id_seq'), 'running', 'running', u.t, v_expires, v_now
      from (select x.k, x.r, gen_random_uuid() as t
              from unnest(_claim_new_keys.keys, _claim_new_keys.requests) x(k, r)
             order by x.k collate "C") u
    on conflict on constraint operations_pkey do nothing
    returning o.key, o.lease_token, o.fingerprint
  )
  select array_agg(ins.key order by ins.key collate "C"), array_agg(ins.lease_token order by ins.key collate "C"),
         array_agg(ins.fingerprint order by ins.key collate "C")
    into v_keys, v_tokens, v_fingerprints
    from ins;
  v_decided := clock_timestamp();
  if coalesce(cardinality(v_keys), 0) <> cardinality(_claim_new_keys.keys) then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  -- The insert may have waited (see above): decide again with what committed meanwhile. Access
  -- is read again after every insert, waited or not (one read per batch): a revocation that
  -- committed during a wait of any length sends the batch key by key, where each claim answers it.
  v_floor := settle_private._access(_claim_new_keys.tenant, _claim_new_keys.principal);
  if v_floor < 0 or _claim_new_keys.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  if v_decided > v_now + _claim_new_keys.lease / 10 then
    v_now := v_decided;
    v_expires := settle_private._expiry(v_now, _claim_new_keys.lease);
    update settle_private.operations o
       set lease_expires_at = v_expires, updated_at = v_now
     where o.tenant = _claim_new_keys.tenant and o.key = any (v_keys);
  end if;


  return query
    select u.i::integer, u.k, 'acquired'::text, 'running'::settle.status, 1, n.t, v_expires, null::integer,
           n.f, null::jsonb, null::integer, null::jsonb, null::boolean, null::text[], null::text, null::text
      from unnest(_claim_new_keys.keys) with ordinality u(k, i)
      join unnest(v_keys, v_tokens, v_fingerprints) n(k, t, f) on n.k = u.k
     order by u.i;
end
$$;

-- The set-based complete of a batch of lease holders (settle.complete_many, whose caller checked
-- the input, access, the floor, and that every key is distinct). Locks the operations in the
-- batch's fixed order (key COLLATE "C"), each only if, on its latest version, the presented
-- attempt holds its lease with the presented token, lock and binding and nothing settled (the
-- test of settle.complete's common path); then, under the locks, settles every key as that path
-- does: the operation completed with its result (its feed event written by the guard) and the
-- log of the settlement in the key's history; every answer `settled`, reason current_attempt.
-- Raises SE099 (the caller then decides key by key, after the rollback to its block releases
-- these locks) when any key is not such a success (not locked).
create function settle_private._complete_holders(tenant text, keys text[], attempts integer[], lease_tokens uuid[],
  fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[])
returns setof settle.complete_many_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz;
  v_n integer := cardinality(_complete_holders.keys);
  v_locked integer;
  v_settled integer;
  v_keys text[];
  v_before settle.status[];
  v_claim_seqs bigint[];
  v_floor bigint;
begin
  -- The two statements that join the batch with the tables are run by EXECUTE, so that each is
  -- planned at every call with the batch's arrays and the tables' current sizes: a plan kept
  -- for the session from a young table (a hash join over a sequential scan of a few pages)
  -- stays after the table grew, and every batch then reads every row. Not plan_cache_mode =
  -- force_custom_plan on the function: that setting holds for the triggers the statements fire
  -- too, which then plan their statements again for every row (measured: a quarter of the
  -- batch's server CPU, bench/perf-profile.ts batch).
  -- Each key's row is looked up (and locked) by its primary key, one key after the other in
  -- the fixed order: the lateral subquery runs once per key of the sorted list.
  execute $q$
    select count(*), array_agg(x.key), array_agg(x.status), array_agg(x.claim_seq)
      from (select u.* from unnest($2, $3, $4, $5) u(k, a, t, f) order by u.k collate "C") u
     cross join lateral (
       select o.key, o.status, o.claim_seq from settle_private.operations o
        where o.tenant = $1 and o.key = u.k
          and o.attempt = u.a and o.lease_token = u.t and o.status <> 'completed' and o.fingerprint = u.f
          and o.principal = $6 and o.scopes = settle_private._normalize_scopes($7) and o.binding_generation = $8
          for update) x
  $q$ into v_locked, v_keys, v_before, v_claim_seqs
  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts, _complete_holders.lease_tokens,
        _complete_holders.fingerprints, _complete_holders.principal, _complete_holders.scopes,
        _complete_holders.binding_generation;
  if v_locked <> v_n then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  -- The locking read may have waited for another session's lock: access is judged again under the
  -- locks, as settle.complete judges it after its wait. A revoked binding or tenant sends the
  -- batch key by key, where each complete answers it (fenced, or SE013).
  v_floor := settle_private._access(_complete_holders.tenant, _complete_holders.principal);
  if v_floor < 0 or _complete_holders.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;

  v_now := clock_timestamp();
  -- As settle.complete: each key's settlement and its log on the operation, its place in the
  -- key's history after its audit rows and the claim of its current attempt (the holder of the
  -- lease has reported nothing and has no record: nothing else is read); the settlements'
  -- audit ids drawn once each, in the fixed order, as settle.complete draws them key after key.
  execute $q$
    with s as materialized (
      select y.k, y.a, y.r, y.status_before, y.seq, nextval('settle_private.audit_log_audit_id_seq') as audit_id
        from (select u.k, u.a, u.r, b.status_before,
                     coalesce(greatest(
                       (select l.seq from settle_private.audit_log l where l.tenant = $1 and l.key = u.k
                         order by l.seq desc limit 1),
                       b.claim_seq), 0) + 1 as seq
                from unnest($2, $3, $4) u(k, a, r)
                join unnest($5, $6, $7) b(k, status_before, claim_seq) on b.k = u.k
               order by u.k collate "C") y
    ), op as (
      update settle_private.operations o
         set status = 'completed', result = s.r, settled_attempt = s.a, settled_at = $8, settled_seq = s.seq,
             settled_audit_id = s.audit_id, settled_status_before = s.status_before, settled_reason = 'current_attempt',
             settled_by = session_user, lease_token = null, lease_expires_at = null, dead_lettered_at = null,
             dead_letter_reason = null, error = null, updated_at = $8
        from s
       where o.tenant = $1 and o.key = s.k
      returning o.key
    )
    select count(*) from op
  $q$ into v_settled
  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts, _complete_holders.results,
        v_keys, v_before, v_claim_seqs, v_now;
  if v_settled <> v_n then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;

  return query
    select u.i::integer, u.k, 'settled'::text, 'current_attempt'::text, 'completed'::settle.status, u.a, u.a, u.r,
           null::jsonb, null::text[], false, null::text
      from unnest(_complete_holders.keys, _complete_holders.attempts, _complete_holders.results)
           with ordinality u(k, a, r, i)
     order by u.i;
end
$$;

-- The end of a pass of a batch decided key by key (settle.claim_many, settle.complete_many), which
-- every key's single call has decided: the batch's instant, after its last wait (a wait of a later
-- key's call for another session's lock). The single calls judged access each at its own
-- instant; the batch must be those calls made at this one. Access is read again: when it no
-- longer grants what it granted as the pass began (`floor_at_start`, settle_private._access: the
-- tenant binding revoked, or the binding generation revoked, while a later key waited), raises
-- SE098, which the batch catches to undo the pass and decide every key again, from this state.
-- Floors only rise and a revoked tenant makes the next pass raise SE013, so the next pass ends
-- the loop. Returns the instant (the batch measures its leases from it).
create function settle_private._keyed_instant(tenant text, principal text, binding_generation bigint,
  floor_at_start bigint)
returns timestamptz
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_floor bigint := settle_private._access(_keyed_instant.tenant, _keyed_instant.principal);
begin
  if (v_floor >= 0 and _keyed_instant.binding_generation >= v_floor)
     is distinct from (floor_at_start >= 0 and _keyed_instant.binding_generation >= floor_at_start) then
    raise sqlstate 'SE098' using message = 'the batch is decided again';
  end if;
  return clock_timestamp();
end
$$;

-- claim_many(tenant, keys, requests, principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown)
-- settle.claim for every key, in one call and one transaction: one row per key, in list order.
create function settle.claim_many(
  tenant text,
  keys text[],
  requests jsonb[],
  principal text,
  scopes text[] default '{}',
  binding_generation bigint default 0,
  lease interval default '30 seconds',
  worker text default null,
  max_attempts integer default 5,
  rerun_after_unknown boolean default true)
returns setof settle.claim_many_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_bad bigint;
  v_bytes bigint;
  v_item record;
  v_res settle.claim_result;
  v_out settle.claim_many_result[];
  v_floor bigint;
  v_started timestamptz;
  v_end timestamptz;
  v_expires timestamptz;
  v_acquired text[];
begin
  perform settle_private._check_batch_shape(array['keys', 'requests'],
    array[cardinality(claim_many.keys), cardinality(claim_many.requests)],
    array[array_ndims(claim_many.keys), array_ndims(claim_many.requests)],
    array[array_lower(claim_many.keys, 1), array_lower(claim_many.requests, 1)],
    array[(select min(u.i) from unnest(claim_many.keys) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(claim_many.requests) with ordinality u(v, i) where u.v is null)]);
  -- The arguments every key shares, then every element, by the single-key rules (their fast
  -- predicates first, as settle.claim's): nothing is decided before the whole batch passed.
  if (settle_private._name_ok(claim_many.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._binding_ok(claim_many.principal, claim_many.scopes, claim_many.binding_generation)
      and settle_private._lease_ok(claim_many.lease)
      and (claim_many.worker is null or settle_private._name_ok(claim_many.worker, settle_private._limit('worker_bytes')))
      and claim_many.max_attempts between 1 and settle_private._limit('max_attempts')
      and claim_many.rerun_after_unknown is not null) is not true then
    perform settle_private._check_claim_args(claim_many.tenant, 'key', '{}', claim_many.principal, claim_many.scopes,
      claim_many.binding_generation, claim_many.lease, claim_many.worker, claim_many.max_attempts);
    perform settle_private._raise('SE008', 'rerun_after_unknown must not be NULL',
      jsonb_build_object('field', 'rerun_after_unknown'), 'Pass true (open a new attempt) or false (answer in_doubt).');
  end if;
  -- Each request is measured once (settle_private._json_bytes), for its own limit and the batch's.
  select min(u.i) filter (where (settle_private._name_ok(u.k, settle_private._limit('key_bytes'))
                                 and u.n <= settle_private._limit('request_bytes')) is not true),
         sum(u.n)
    into v_bad, v_bytes
    from (select x.k, x.i, settle_private._json_bytes(x.r, settle_private._limit('request_bytes')) as n
            from unnest(claim_many.keys, claim_many.requests) with ordinality x(k, r, i)) u;
  if v_bad is not null then
    perform settle_private._check_batch_element('claim', v_bad, claim_many.tenant, claim_many.keys[v_bad],
      claim_many.requests[v_bad], claim_many.principal, claim_many.scopes, claim_many.binding_generation,
      claim_many.lease, claim_many.worker, claim_many.max_attempts, null, null, null, null);
  end if;
  perform settle_private._check_batch_bytes('requests', v_bytes);

  -- A batch of new keys (the common case) is claimed set-based when nothing can make it differ
  -- from its single claims: access granted and the generation not revoked, every key distinct and
  -- without an operation. A key inserted meanwhile by another session, or a wait, sends the batch
  -- back to the key-by-key path below (settle_private._claim_new_keys).
  v_floor := settle_private._access(claim_many.tenant, claim_many.principal);
  if v_floor >= 0 and claim_many.binding_generation >= v_floor and settle_private._set_based_batches()
     and (select count(distinct u.k) from unnest(claim_many.keys) u(k)) = cardinality(claim_many.keys)
     and not exists (select 1 from unnest(claim_many.keys) u(k)
                      cross join lateral (select 1 from settle_private.operations o
                                           where o.tenant = claim_many.tenant and o.key = u.k limit 1) x) then
    begin
      return query select * from settle_private._claim_new_keys(claim_many.tenant, claim_many.keys, claim_many.requests,
        claim_many.principal, claim_many.scopes, claim_many.binding_generation, claim_many.lease, claim_many.worker,
        claim_many.max_attempts);
      return;
    exception when sqlstate 'SE099' then
      -- Rolled back to the block's start: nothing of the set-based attempt is left, no lock held.
      null;
    end;
  end if;

  -- One key at a time, in the fixed order (see the top of this file): each by settle.claim. The
  -- batch's instant is the end of its last wait (settle_private._keyed_instant): access changed
  -- since the pass began undoes the pass (the block's subtransaction) and decides every key again;
  -- a pass longer than a tenth of the lease measures every lease it acquired again from its end.
  loop
    v_floor := settle_private._access(claim_many.tenant, claim_many.principal);
    v_started := clock_timestamp();
    begin
      v_out := '{}'::settle.claim_many_result[];
      for v_item in
        select u.k, u.r, u.i from unnest(claim_many.keys, claim_many.requests) with ordinality u(k, r, i)
         order by u.k collate "C", u.i
      loop
        v_res := settle.claim(claim_many.tenant, v_item.k, v_item.r, claim_many.principal, claim_many.scopes,
          claim_many.binding_generation, claim_many.lease, claim_many.worker, claim_many.max_attempts,
          claim_many.rerun_after_unknown);
        v_out := v_out || row(v_item.i, v_item.k, v_res.outcome, v_res.status, v_res.attempt, v_res.lease_token,
          v_res.lease_expires_at, v_res.retry_after_ms, v_res.fingerprint, v_res.result, v_res.settled_attempt,
          v_res.error, v_res.dead_lettered, v_res.conflict_on, v_res.reason, v_res.dead_letter_reason)::settle.claim_many_result;
      end loop;
      v_end := settle_private._keyed_instant(claim_many.tenant, claim_many.principal, claim_many.binding_generation,
        v_floor);
      exit;
    exception when sqlstate 'SE098' then
      -- Rolled back to the block's start: every key is decided again, at a later instant.
      null;
    end;
  end loop;
  if v_end > v_started + claim_many.lease / 10 then
    -- Every lease the batch acquired, measured again from its instant, and so is what its answers
    -- say of them: a key listed again after it was acquired answers in_progress with that lease.
    v_expires := settle_private._expiry(v_end, claim_many.lease);
    select array_agg(x.key) into v_acquired from unnest(v_out) x where x.outcome = 'acquired';
    update settle_private.operations o
       set lease_expires_at = v_expires, updated_at = v_end
      from unnest(v_out) x
     where x.outcome = 'acquired' and o.tenant = claim_many.tenant and o.key = x.key and o.lease_token = x.lease_token;
    return query select o.ordinal, o.key, o.outcome, o.status, o.attempt, o.lease_token,
                        case when o.key = any (v_acquired) and o.outcome in ('acquired', 'in_progress') then v_expires
                             else o.lease_expires_at end,
                        case when o.key = any (v_acquired) and o.outcome = 'in_progress'
                             then greatest(1, ceil(extract(epoch from (v_expires - v_end)) * 1000))::integer
                             else o.retry_after_ms end,
                        o.fingerprint, o.result, o.settled_attempt, o.error, o.dead_lettered,
                        o.conflict_on, o.reason, o.dead_letter_reason
                   from unnest(v_out) o order by o.ordinal;
    return;
  end if;
  return query select * from unnest(v_out) o order by o.ordinal;
end
$$;

comment on function settle.claim_many(text, text[], jsonb[], text, text[], bigint, interval, text, integer, boolean) is
  'Claim many keys of one tenant in one call: settle.claim for every key, in one transaction, answered per key.
Parameters: tenant; keys text[] (1 to max_batch_keys = 1000 keys, each as settle.claim''s key; a key may repeat); requests jsonb[] (one request per key, same order); principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown: as settle.claim, shared by every key.
Outcomes: one row per element of keys, in their order: ordinal (1-based), key, and exactly what settle.claim answers for that key (acquired with its own attempt, lease_token, lease_expires_at and fingerprint | in_progress | replay | failed | unknown | in_doubt | conflict | refused). A key listed twice is claimed twice, in list order, as a second caller would be (the second answers in_progress when the first acquired).
SQLSTATEs: SE060 more than 1000 keys; SE061 no key; SE062 requests not one per key (a length, dimension or lower bound that differs); SE063 keys or requests NULL or with a NULL element (DETAIL: field, ordinal); SE064 the requests hold more than max_batch_bytes = 16 MiB of JSON text together; an element that breaks settle.claim''s rules raises settle.claim''s code (SE002 key, SE004 request) with its ordinal in DETAIL; SE001, SE003, SE007, SE008 for the shared arguments; SE013 tenant not granted to this login role. The whole batch is checked before any key is claimed: an error claims nothing.
Locking: as settle.claim for each key, the keys visited in one fixed order (key COLLATE "C", then ordinal), so concurrent batches over overlapping keys never deadlock. Every lock is held until the batch''s transaction ends.
Idempotency: as settle.claim per key: repeating the batch with the same requests and binding joins the same operations (replay once completed). Each key leaves what its single claim leaves in settle.audit_log.';

-- complete_many(tenant, keys, attempts, lease_tokens, fingerprints, principal, scopes, binding_generation, results)
-- settle.complete for every key, in one call and one transaction: one row per key, in list order.
create function settle.complete_many(
  tenant text,
  keys text[],
  attempts integer[],
  lease_tokens uuid[],
  fingerprints text[],
  principal text,
  scopes text[],
  binding_generation bigint,
  results jsonb[])
returns setof settle.complete_many_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_bad bigint;
  v_bytes bigint;
  v_item record;
  v_res settle.observation_result;
  v_out settle.complete_many_result[];
  v_floor bigint;
begin
  perform settle_private._check_batch_shape(array['keys', 'attempts', 'lease_tokens', 'fingerprints', 'results'],
    array[cardinality(complete_many.keys), cardinality(complete_many.attempts), cardinality(complete_many.lease_tokens),
          cardinality(complete_many.fingerprints), cardinality(complete_many.results)],
    array[array_ndims(complete_many.keys), array_ndims(complete_many.attempts), array_ndims(complete_many.lease_tokens),
          array_ndims(complete_many.fingerprints), array_ndims(complete_many.results)],
    array[array_lower(complete_many.keys, 1), array_lower(complete_many.attempts, 1), array_lower(complete_many.lease_tokens, 1),
          array_lower(complete_many.fingerprints, 1), array_lower(complete_many.results, 1)],
    array[(select min(u.i) from unnest(complete_many.keys) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.attempts) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.lease_tokens) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.fingerprints) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.results) with ordinality u(v, i) where u.v is null)]);
  if (settle_private._name_ok(complete_many.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._binding_ok(complete_many.principal, complete_many.scopes, complete_many.binding_generation)) is not true then
    perform settle_private._check_operation_key(complete_many.tenant, 'key');
    perform settle_private._check_binding(complete_many.principal, complete_many.scopes, complete_many.binding_generation);
  end if;
  select min(u.i) filter (where (settle_private._name_ok(u.k, settle_private._limit('key_bytes')) and u.a >= 1
                                 and u.f ~ '^v[0-9]+:[0-9a-f]+$' and octet_length(u.f) - strpos(u.f, ':') = 64
                                 and u.n <= settle_private._limit('result_bytes')) is not true),
         sum(u.n)
    into v_bad, v_bytes
    from (select x.k, x.a, x.f, x.i, settle_private._json_bytes(x.r, settle_private._limit('result_bytes')) as n
            from unnest(complete_many.keys, complete_many.attempts, complete_many.fingerprints, complete_many.results)
                 with ordinality x(k, a, f, r, i)) u;
  if v_bad is not null then
    perform settle_private._check_batch_element('complete', v_bad, complete_many.tenant, complete_many.keys[v_bad], null,
      complete_many.principal, complete_many.scopes, complete_many.binding_generation, null, null, null,
      complete_many.attempts[v_bad], complete_many.lease_tokens[v_bad], complete_many.fingerprints[v_bad],
      complete_many.results[v_bad]);
  end if;
  perform settle_private._check_batch_bytes('results', v_bytes);

  -- A batch of lease holders (the common case) settles set-based when nothing can make it differ
  -- from its single completes: access granted and the generation not revoked, every key distinct;
  -- settle_private._complete_holders checks the rest under the row locks and sends the batch
  -- back to the key-by-key path below when any key is not its lease holder's plain success.
  v_floor := settle_private._access(complete_many.tenant, complete_many.principal);
  if v_floor >= 0 and complete_many.binding_generation >= v_floor and settle_private._set_based_batches()
     and (select count(distinct u.k) from unnest(complete_many.keys) u(k)) = cardinality(complete_many.keys) then
    begin
      return query select * from settle_private._complete_holders(complete_many.tenant, complete_many.keys,
        complete_many.attempts, complete_many.lease_tokens, complete_many.fingerprints, complete_many.principal,
        complete_many.scopes, complete_many.binding_generation, complete_many.results);
      return;
    exception when sqlstate 'SE099' then
      null;
    end;
  end if;

  -- One key at a time, in the fixed order (see the top of this file): each by settle.complete,
  -- at the batch's instant as claim_many's (settle_private._keyed_instant).
  loop
    v_floor := settle_private._access(complete_many.tenant, complete_many.principal);
    begin
      v_out := '{}'::settle.complete_many_result[];
      for v_item in
        select u.k, u.a, u.t, u.f, u.r, u.i
          from unnest(complete_many.keys, complete_many.attempts, complete_many.lease_tokens, complete_many.fingerprints,
                      complete_many.results) with ordinality u(k, a, t, f, r, i)
         order by u.k collate "C", u.i
      loop
        v_res := settle.complete(complete_many.tenant, v_item.k, v_item.a, v_item.t, v_item.f, complete_many.principal,
          complete_many.scopes, complete_many.binding_generation, v_item.r);
        v_out := v_out || row(v_item.i, v_item.k, v_res.outcome, v_res.reason, v_res.status, v_res.attempt,
          v_res.settled_attempt, v_res.result, v_res.error, v_res.conflict_on, v_res.dead_lettered,
          v_res.dead_letter_reason)::settle.complete_many_result;
      end loop;
      perform settle_private._keyed_instant(complete_many.tenant, complete_many.principal,
        complete_many.binding_generation, v_floor);
      exit;
    exception when sqlstate 'SE098' then
      null;
    end;
  end loop;
  return query select * from unnest(v_out) o order by o.ordinal;
end
$$;

comment on function settle.complete_many(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[]) is
  'Complete many attempts of one tenant in one call: settle.complete for every key, in one transaction, answered per key.
Parameters: tenant; keys text[] (1 to max_batch_keys = 1000; a key may repeat); attempts integer[], lease_tokens uuid[], fingerprints text[] (from each key''s acquired claim), results jsonb[] (each <= 1 MiB, together <= max_batch_bytes = 16 MiB): one element per key, same order; principal, scopes, binding_generation: the binding presented at claim, shared by every key.
Outcomes: one row per element of keys, in their order: ordinal (1-based), key, and exactly what settle.complete answers for that key (settled | already_settled | duplicate | conflict | fenced, with its reason and the canonical state it discloses). A key listed twice is completed twice, in list order, as a second caller would be (the second, identical, answers duplicate).
SQLSTATEs: SE060 more than 1000 keys; SE061 no key; SE062 a per-key array not one per key; SE063 an array or element NULL (DETAIL: field, ordinal); SE064 the results hold more than 16 MiB of JSON text together; an element that breaks settle.complete''s rules raises its code (SE002 key, SE004 fingerprint, SE005 result, SE008 attempt) with its ordinal in DETAIL; SE001, SE003 for the shared arguments; SE010 a key never claimed; SE013 tenant not granted to this login role. The whole batch is checked before any key is completed: an error settles nothing.
Locking: as settle.complete for each key (its operation row, FOR UPDATE), the keys visited in one fixed order (key COLLATE "C", then ordinal), so concurrent batches never deadlock. Works inside the caller''s transaction: commit a same-database effect atomically with the batch''s settlements.
Idempotency: as settle.complete per key: repeating the batch answers duplicate for every key it settled. Each key leaves what its single complete leaves in settle.audit_log, and its own feed event.';

revoke all on function settle.claim_many(text, text[], jsonb[], text, text[], bigint, interval, text, integer, boolean),
  settle.complete_many(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[]) from public;
grant execute on function
  settle.claim_many(text, text[], jsonb[], text, text[], bigint, interval, text, integer, boolean),
  settle.complete_many(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[])
  to settle_app;

reset role;
