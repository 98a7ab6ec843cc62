-- pg-settle on Citus, step 12 (issue 23, item 5): the hot path as statements on one table each,
-- applied only where Citus caches the local shard's plan of such a statement. Run by
-- `pg-settle distribute` after sql/citus/distribute.sql committed (the probe below reads the
-- committed shards from each worker), in its own transaction, as a superuser. Idempotent.
--
-- Why. Inside a delegated call the worker hands every statement of the function that names a
-- Citus table to Citus's planner. Citus keeps a plan across calls only for a statement on one
-- distributed table filtered by `key = $n` (its "fast path") and an INSERT of values: a generic
-- plan with deferred pruning, and under it the local shard's plan, cached on the generic plan.
-- Every other statement (several tables, a subquery, a WITH, a data-modifying WITH, a call of a
-- volatile function) is planned again at each call: on the shell tables, then deparsed, parsed and planned again for the shard.
-- So on a Citus that caches local plans the hot path costs the worker least as single-table
-- statements (docs/scale-out.md: the worker's CPU per cycle -55%). Citus 13.2.2 does not cache
-- them (a bug: every execution plans the shard query again and appends the plan to a list kept
-- for the life of the connection; fixed by citusdata/citus#8824, in Citus 13.5.0): there, more,
-- smaller statements cost more than the migrations' fewer, larger ones, and this step changes
-- nothing.
--
-- The probe (no version number: a patched or backported build reports its base version): on
-- every worker, one session runs a fast-path SELECT on a local shard of settle_private.operations
-- 40 times from PL/pgSQL (a plan cached as PL/pgSQL caches the engine's statements) and compares
-- the memory of its cached plans after the 10th and the 40th execution. A Citus that caches the
-- local plan adds nothing after the first reuse; 13.2.2 adds one shard plan per execution. The
-- answer comes back through run_command_on_workers: success, or the error this probe raises
-- (its message starts with "pg-settle probe:").
--
-- The setting pg_settle.single_table_statements ('auto', the default; 'on' / 'off' force it, for
-- measurements: bench:citus --single-table) decides; its result row says what was found and done.
--
-- The rewrites keep the checks, their order, the writes and the locks of the migrated text:
--   * settle_private.claim's first read (access verdict, operation row): settle_private._access
--     (its own plain read of the local placements, step 10), then the operation row; its new
--     key's INSERT, with the audit id drawn just before it (Citus caches no local plan of a
--     statement that calls a volatile function such as gen_random_uuid or nextval: it would plan
--     the shard's INSERT again at every call, about 130 us of the worker's CPU per new key);
--   * settle.complete's path for the current lease holder: access (binding), the operation row
--     locked, access (floor), the audit rows' maximum, the operation's UPDATE;
--   * settle_private._next_seq: one read per table.
-- Each piece is found by its first and last lines and replaced only when the text between, with
-- comments and whitespace removed, is what this step knows; otherwise the function is left as the
-- migrations wrote it (correct, slower) and the result row names it (test/citus/single-table.test.ts
-- fails on any build: it forces this step in a transaction it rolls back; a migration that changes
-- one of these pieces must update it here). Only after steps 10-11 applied (the hot path calls
-- _access, which reads the local placements). The rewritten text carries "pg-settle distribute,
-- step 12"; CREATE OR REPLACE keeps owner, grants, comment, STRICT and the distribution, and Citus
-- propagates it to every node. Not undone: a cluster moved back to a Citus without the cache
-- keeps the rewritten functions (correct, slower there) until the next migrate from scratch.

set local client_min_messages = warning;

do $step$
declare
  v_mode text := coalesce(nullif(pg_catalog.current_setting('pg_settle.single_table_statements', true), ''), 'auto');
  v_cached boolean;
  v_probe text;
  v_apply boolean;
  v_fn record;
  v_src text;
  v_new text;
  v_ok boolean;
  v_i integer;
  v_a integer;
  v_b integer;
  v_done text[] := '{}';
  v_left text[] := '{}';
begin
  if v_mode not in ('auto', 'on', 'off') then
    raise exception using errcode = 'invalid_parameter_value',
      message = 'pg_settle.single_table_statements must be auto, on or off',
      detail = pg_catalog.json_build_object('value', v_mode)::text;
  end if;
  -- The probe, on every worker (see above).
  -- A worker without a shard of operations (added, not yet rebalanced) has nothing to say.
  select pg_catalog.bool_and(r.success) filter (where r.result !~ 'pg-settle probe: no shard'),
         pg_catalog.string_agg(r.nodename || ':' || r.nodeport || ' ' || case when r.success then 'caches local plans' else r.result end, '; ' order by r.nodename, r.nodeport)
    into v_cached, v_probe
    from run_command_on_workers($probe$
do $p$
declare
  v_key text;
  v_n bigint;
  v_at10 bigint;
  v_at40 bigint;
begin
  for i in 1 .. 100000 loop
    v_key := 'pg-settle probe ' || i;
    exit when exists (select 1 from pg_catalog.pg_dist_placement p
                       where p.shardid = get_shard_id_for_distribution_column('settle_private.operations', v_key)
                         and p.groupid = (select g.groupid from pg_catalog.pg_dist_local_group g));
    v_key := null;
  end loop;
  if v_key is null then
    raise exception 'pg-settle probe: no shard of settle_private.operations on this node';
  end if;
  -- Every statement and expression of the loop runs from the first iteration on (each has its own
  -- cached plan, created at its first run): only the count's plans can grow after the 10th.
  for i in 1 .. 40 loop
    select pg_catalog.count(*) into v_n from settle_private.operations o where o.key = v_key;
    select pg_catalog.sum(c.total_bytes) into v_at40 from pg_catalog.pg_backend_memory_contexts c where c.name = 'CachedPlan';
    v_at10 := case when i = 10 then v_at40 else v_at10 end;
  end loop;
  if v_at40 > v_at10 then
    raise exception 'pg-settle probe: re-plans local shard queries (cached plans grew by % bytes in 30 executions)', v_at40 - v_at10;
  end if;
end
$p$
$probe$) r;
  v_apply := case v_mode when 'on' then true when 'off' then false else coalesce(v_cached, false) end;
  if v_apply and not exists (select 1 from pg_catalog.pg_proc p
                              where p.oid = pg_catalog.to_regprocedure('settle_private._access(text, text)')
                                and p.prosrc ~ 'settle_private\.tenant_bindings_[0-9]+\M') then
    v_apply := false;
    v_probe := v_probe || '; steps 10-11 did not apply (settle_private._access reads the reference tables through Citus)';
  end if;

  if v_apply then
    for v_fn in
      select p.oid, x.name, x.pieces
        from (values
  ('settle_private.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean)', array[
    -- (first line, last line, the text between as migrated, its replacement), in order
    array[$f$  v_seen record;
begin
$f$, '', $f$  v_seen record;
begin
$f$, $r$  v_seen record;
  v_citus_audit_id bigint;
begin
$r$],
    array[$f$  select s.verdict, s.op,$f$, $f$          offset 0) s;
$f$, $f$  select s.verdict, s.op,
         s.op is null and s.verdict >= 0 and claim.binding_generation >= s.verdict as new_key
    into v_seen
    from (select settle_private._access(claim.tenant, claim.principal) as verdict,
                 (select o from settle_private.operations o where o.tenant = claim.tenant and o.key = claim.key) as op
          offset 0) s;
$f$, $r$  -- On Citus (pg-settle distribute, step 12): the same reads as statements on one table each,
  -- each planned once per connection where Citus caches local plans (sql/citus/single-table.sql).
  v_floor := settle_private._access(claim.tenant, claim.principal);
  select o.* into v_op from settle_private.operations o where o.tenant = claim.tenant and o.key = claim.key;
  select v_floor as verdict, case when v_op.tenant is not null then v_op end as op,
         v_op.tenant is null and v_floor >= 0 and claim.binding_generation >= v_floor as new_key
    into v_seen;
$r$],
    array[$f$    insert into settle_private.operations as o
$f$, $f$'running', v_token, settle_private._expiry(v_now, claim.lease), v_now)
$f$, $f$    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    values
      (claim.tenant, claim.key, settle_private._fingerprint(claim.request), claim.request, claim.principal,
       settle_private._normalize_scopes(claim.scopes), claim.binding_generation, claim.max_attempts, v_now,
       1, v_token, claim.worker, v_now, session_user, v_seq, nextval('settle_private.audit_log_audit_id_seq'), 'running',
       'running', v_token, settle_private._expiry(v_now, claim.lease), v_now)
$f$, $r$    -- On Citus (pg-settle distribute, step 12): the audit id drawn before the INSERT. Citus
    -- caches a statement's local plan only when the statement calls no volatile function
    -- (gen_random_uuid, nextval); otherwise it plans the shard's INSERT again at every call.
    v_citus_audit_id := nextval('settle_private.audit_log_audit_id_seq');
    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    values
      (claim.tenant, claim.key, settle_private._fingerprint(claim.request), claim.request, claim.principal,
       settle_private._normalize_scopes(claim.scopes), claim.binding_generation, claim.max_attempts, v_now,
       1, v_token, claim.worker, v_now, session_user, v_seq, v_citus_audit_id, 'running',
       'running', v_token, settle_private._expiry(v_now, claim.lease), v_now)
$r$]]),
  ('settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb)', array[
    array[$f$  v_res settle.observation_result;
begin
$f$, '', $f$  v_res settle.observation_result;
begin
$f$, $r$  v_res settle.observation_result;
  v_citus_ok boolean;
  v_citus_seq bigint;
begin
$r$],
    array[$f$    select o.status, o.claim_seq into v_seen
$f$, $f$      if found then
        return v_res;
      end if;
$f$, $f$    select o.status, o.claim_seq into v_seen
      from settle_private.operations o
     where o.tenant = complete.tenant and o.key = complete.key
       and o.attempt = complete.attempt and o.lease_token = complete.lease_token and o.status <> 'completed'
       and o.fingerprint = complete.fingerprint and o.principal = complete.principal
       and o.scopes = settle_private._normalize_scopes(complete.scopes)
       and o.binding_generation = complete.binding_generation
       and settle_private._access(complete.tenant, null) >= 0
       for update;
    if found then
      v_now := clock_timestamp();
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      with s as materialized (
        select settle_private._access(complete.tenant, complete.principal) as verdict,
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
$f$, $r$    -- On Citus (pg-settle distribute, step 12): the same checks and writes as statements on
    -- one table each, keyed by key, each planned once per connection where Citus caches local
    -- plans (sql/citus/single-table.sql).
    v_citus_ok := false;
    if settle_private._access(complete.tenant, null) >= 0 then
      select o.status, o.claim_seq into v_seen from settle_private.operations o
       where o.tenant = complete.tenant and o.key = complete.key
         and o.attempt = complete.attempt and o.lease_token = complete.lease_token and o.status <> 'completed'
         and o.fingerprint = complete.fingerprint and o.principal = complete.principal
         and o.scopes = settle_private._normalize_scopes(complete.scopes)
         and o.binding_generation = complete.binding_generation
         for update;
      v_citus_ok := found;
    end if;
    if v_citus_ok then
      v_now := clock_timestamp();
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      if settle_private._access(complete.tenant, complete.principal) = 0 then
        select coalesce(greatest(max(l.seq), v_seen.claim_seq), 0) + 1 into v_citus_seq
          from settle_private.audit_log l where l.tenant = complete.tenant and l.key = complete.key;
        update settle_private.operations o
           set status = 'completed', result = complete.result, settled_attempt = complete.attempt,
               settled_at = v_now, settled_seq = v_citus_seq, settled_audit_id = v_audit_id,
               settled_status_before = v_seen.status, settled_reason = 'current_attempt', settled_by = session_user,
               lease_token = null, lease_expires_at = null, dead_lettered_at = null,
               dead_letter_reason = null, error = null, updated_at = v_now
         where o.tenant = complete.tenant and o.key = complete.key
        returning 'settled'::text, 'current_attempt'::text, o.status, o.attempt, o.settled_attempt, o.result,
                  null::jsonb, null::text[], false, null::text
          into v_res;
        return v_res;
      end if;
$r$]]),
  ('settle_private._next_seq(text, text)', array[
    array[$f$  v_seq bigint;
begin
$f$, '', $f$  v_seq bigint;
begin
$f$, $r$  v_seq bigint;
  v_citus_op_seq bigint;
begin
$r$],
    array[$f$  select coalesce(greatest($f$, $f$    into v_seq;
$f$, $f$  select coalesce(greatest(
           (select max(l.seq) from settle_private.audit_log l where l.tenant = _next_seq.tenant and l.key = _next_seq.key),
           (select max(a.claim_seq) from settle_private.attempts a
             where a.tenant = _next_seq.tenant and a.key = _next_seq.key),
           (select greatest(o.claim_seq, o.settled_seq) from settle_private.operations o
             where o.tenant = _next_seq.tenant and o.key = _next_seq.key)), 0) + 1
    into v_seq;
$f$, $r$  -- On Citus (pg-settle distribute, step 12): one statement per table (sql/citus/single-table.sql).
  select max(l.seq) into v_seq from settle_private.audit_log l where l.tenant = _next_seq.tenant and l.key = _next_seq.key;
  select greatest(v_seq, max(a.claim_seq)) into v_seq
    from settle_private.attempts a where a.tenant = _next_seq.tenant and a.key = _next_seq.key;
  select greatest(o.claim_seq, o.settled_seq) into v_citus_op_seq
    from settle_private.operations o where o.tenant = _next_seq.tenant and o.key = _next_seq.key;
  v_seq := coalesce(greatest(v_seq, v_citus_op_seq), 0) + 1;
$r$]])
        ) x(name, pieces)
        join pg_catalog.pg_proc p on p.oid = pg_catalog.to_regprocedure(x.name)
    loop
      select p.prosrc into v_src from pg_catalog.pg_proc p where p.oid = v_fn.oid;
      if pg_catalog.strpos(v_src, 'pg-settle distribute, step 12') > 0 then
        v_done := v_done || v_fn.name;
        continue;
      end if;
      v_new := v_src;
      v_ok := true;
      for v_i in 1 .. pg_catalog.array_length(v_fn.pieces, 1) loop
        v_a := pg_catalog.strpos(v_new, v_fn.pieces[v_i][1]);
        v_b := case when v_a > 0
                    then pg_catalog.strpos(pg_catalog.substr(v_new, v_a + pg_catalog.length(v_fn.pieces[v_i][1])), v_fn.pieces[v_i][2]) end;
        if v_a = 0 or v_b = 0 then
          v_ok := false;
          exit;
        end if;
        v_b := v_a + pg_catalog.length(v_fn.pieces[v_i][1]) + v_b - 1 + pg_catalog.length(v_fn.pieces[v_i][2]);
        -- The piece as found and as known, both without comments and with single spaces.
        if pg_catalog.btrim(pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
               pg_catalog.substr(v_new, v_a, v_b - v_a), '--[^\n]*', '', 'g'), '/\*.*?\*/', '', 'g'), '\s+', ' ', 'g'))
           <> pg_catalog.btrim(pg_catalog.regexp_replace(pg_catalog.regexp_replace(pg_catalog.regexp_replace(
               v_fn.pieces[v_i][3], '--[^\n]*', '', 'g'), '/\*.*?\*/', '', 'g'), '\s+', ' ', 'g')) then
          v_ok := false;
          exit;
        end if;
        v_new := pg_catalog.substr(v_new, 1, v_a - 1) || v_fn.pieces[v_i][4] || pg_catalog.substr(v_new, v_b);
      end loop;
      if not v_ok then
        v_left := v_left || v_fn.name;
        continue;
      end if;
      execute pg_catalog.replace(pg_catalog.pg_get_functiondef(v_fn.oid), v_src, v_new);
      v_done := v_done || v_fn.name;
    end loop;
  end if;
  perform pg_catalog.set_config('pg_settle.step12', pg_catalog.json_build_object('mode', v_mode, 'cached', v_cached,
    'probe', v_probe, 'rewritten', v_done, 'left_as_migrated', v_left)::text, true);
end
$step$;

-- What the probe found and what was rewritten (printed by pg-settle distribute).
select pg_catalog.current_setting('pg_settle.step12')::json as step12;
