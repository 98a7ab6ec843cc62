-- pg-settle on Citus: shard the engine by operation key and delegate every keyed call to the
-- worker that holds the key. Run by `pg-settle distribute` on the coordinator, as a superuser,
-- in one transaction, after `pg-settle migrate`. Idempotent: run it again after every migration
-- and after adding a node (docs/scale-out.md).
--
-- What it does, and why (each point is a breakage seen on Citus 13.2, issue 14):
--   1. settle_owner may log in. Citus runs the SQL of a non-delegated call (a call inside
--      BEGIN ... COMMIT, the maintenance scans, the read views' SECURITY DEFINER helpers) on the
--      coordinator and opens its connections to the workers as the current user, which inside a
--      SECURITY DEFINER function is settle_owner. It has no password: allow it in pg_hba.conf
--      only from the cluster's own nodes (or give it a certificate / pg_dist_authinfo entry).
--   2. Default privileges (no EXECUTE for PUBLIC on settle_owner's functions) are not propagated
--      by Citus: they are set on every node here, so functions created later stay closed.
--   3. The three private tables of operations are distributed by `key`, colocated (every
--      operation's rows on one shard); their triggers fire on the shards
--      (citus.enable_unsafe_triggers: they read and write only their own row). The access
--      tables (tenant bindings, binding floors, their log) become reference tables.
--   4. Delegation no argument can crash (issue 23): only STRICT, non-set-returning functions are
--      delegated by key (a NULL argument is folded away by PostgreSQL's planner before Citus
--      would hash it and crash the node); settle.claim, which has an optional NULL argument,
--      delegates through the STRICT entry settle._claim.
--   5. Every function in settle and settle_private is distributed (propagated to every node):
--      the hot path (claim, heartbeat, complete, fail, report_unknown, get) delegated by `key`,
--      colocated with the operations, so `select ... from settle.claim(...)` runs on the worker
--      holding the key; the per-key maintenance steps (called once per key by expire_leases /
--      purge from the coordinator) with force_delegation, so that even that nested call runs on
--      the worker; every other function where it is called.
--   6. Function ACLs are made identical on every node: PUBLIC loses EXECUTE everywhere (a
--      function propagated after creation kept PUBLIC on the workers, and the coordinator does
--      not check EXECUTE before delegating a call: the worker's ACL is the one that counts).
--   7. The read views read their rows through SECURITY DEFINER functions (Citus runs a view's
--      shard queries as the caller): callers hold nothing on settle_private, on any node.

do $$
begin
  if not exists (select 1 from pg_catalog.pg_extension where extname = 'citus') then
    raise exception using
      errcode = 'SE031',
      message = 'pg-settle distribute needs the citus extension in this database',
      detail = pg_catalog.json_build_object('database', pg_catalog.current_database())::text,
      hint = 'Install Citus 13.x, CREATE EXTENSION citus on the coordinator and on every worker, '
        || 'register the workers with citus_add_node, then run pg-settle distribute again. '
        || 'On plain PostgreSQL there is nothing to distribute.';
  end if;
  if pg_catalog.to_regclass('settle_private.operations') is null then
    raise exception using
      errcode = 'SE031',
      message = 'pg-settle distribute needs a migrated database (settle_private.operations is missing)',
      detail = pg_catalog.json_build_object('database', pg_catalog.current_database())::text,
      hint = 'Run pg-settle migrate first, then pg-settle distribute.';
  end if;
end
$$;

set local client_min_messages = warning;
set local citus.enable_unsafe_triggers = on;
-- Distributing tables and functions in one transaction needs one connection per node.
set local citus.multi_shard_modify_mode = 'sequential';

-- 1. The owner logs in (node to node only; see above).
alter role settle_owner login;

-- 2. Default privileges on every node, present and future functions closed to PUBLIC.
select pg_catalog.count(*) from run_command_on_all_nodes(
  'alter default privileges for role settle_owner revoke execute on functions from public');

-- 3. Tables, colocated on key.
do $$
declare
  v_table text;
begin
  -- Every other table of an operation's rows (a `key` column in its primary key: audit_overflow,
  -- reconciliation_leases, any added later) is colocated with them the same way.
  if not exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = 'settle_private.operations'::regclass) then
    perform create_distributed_table('settle_private.operations', 'key', colocate_with := 'none');
  end if;
  for v_table in
    select c.oid::regclass::text
      from pg_catalog.pg_class c
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace
      join pg_catalog.pg_constraint k on k.conrelid = c.oid and k.contype = 'p'
      join pg_catalog.pg_attribute a on a.attrelid = c.oid and a.attname = 'key' and a.attnum = any (k.conkey)
     where n.nspname = 'settle_private' and c.relkind = 'r'
       and not exists (select 1 from pg_catalog.pg_dist_partition d where d.logicalrelid = c.oid)
     order by c.oid  -- creation order: a table before those whose foreign keys reference it
  loop
    perform create_distributed_table(v_table, 'key', colocate_with := 'settle_private.operations');
  end loop;
  -- Access (00012): small, global, rarely written, read by every call: reference tables, copied
  -- to every node, so that a delegated call reads them on its worker. The engine's settings
  -- (retention, the purge floor) too, so that maintenance works from any node. (upkeep_jobs
  -- stays on the coordinator: run settle.run_upkeep there.)
  foreach v_table in array array['settle_private.tenant_bindings', 'settle_private.binding_floors', 'settle_private.admin_log',
                                 'settle_private.settings'] loop
    if pg_catalog.to_regclass(v_table) is not null
       and not exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = v_table::regclass) then
      perform create_reference_table(v_table);
    end if;
  end loop;
end
$$;

-- 3b. The settlement feed (00014), per node (issue 23; docs/scale-out.md "The settlement feed on
-- Citus"). Its order is the writing transaction's id (pg_current_xact_id) and its fence the
-- horizon of the reader's snapshot: both are one node's, so the feed is kept per node. Every
-- node has its own feed tables, plain local tables (feed_events, feed_consumers, feed_lanes,
-- feed_waiters: not Citus tables): the trigger _990_feed fires on the shard of the operation,
-- on its worker, in the settling transaction, and writes that node's feed_events (a local
-- insert, no Citus planning). A consumer reads each node's feed on that node (connect to it),
-- with that node's horizon and its own positions there; a key lives on one node, so its events
-- stay in order. event_id is made unique across nodes: each node's identity range starts at
-- its Citus group id times 2^48. The consumer functions are the same on every node.
do $$
declare
  v_table text;
  v_cmds text;
  v_failed text;
begin
  -- Each table on every worker that lacks it: its DDL as Citus prints it (columns, identity,
  -- owner, grants, row security, policies, indexes), then its foreign keys.
  foreach v_table in array array['settle_private.feed_events', 'settle_private.feed_consumers', 'settle_private.feed_lanes',
                                 'settle_private.feed_waiters'] loop
    continue when pg_catalog.to_regclass(v_table) is null;
    select pg_catalog.string_agg(pg_catalog.format('execute %L;', c), E'\n')
      into v_cmds
      from (select e as c from master_get_table_ddl_events(v_table) e
            union all
            select pg_catalog.format('alter table %s add constraint %I %s', k.conrelid::regclass, k.conname,
                                     pg_catalog.pg_get_constraintdef(k.oid))
              from pg_catalog.pg_constraint k where k.conrelid = v_table::regclass and k.contype = 'f') d;
    select pg_catalog.string_agg(r.nodename || ':' || r.nodeport || ': ' || r.result, '; ')
      into v_failed
      from run_command_on_workers(pg_catalog.format(
        E'do $feed$ begin\nif pg_catalog.to_regclass(%L) is null then\nperform pg_catalog.set_config(''citus.enable_ddl_propagation'', ''off'', true);\n%s\nend if;\nend $feed$',
        v_table, v_cmds)) r
     where not r.success;
    if v_failed is not null then
      raise exception using errcode = 'SE031', message = pg_catalog.format('could not create %s on every worker', v_table),
        detail = v_failed;
    end if;
  end loop;
  -- Unique delivery ids across nodes: each worker's identity starts at group id * 2^48.
  select pg_catalog.string_agg(r.nodename || ':' || r.nodeport || ': ' || r.result, '; ')
    into v_failed
    from run_command_on_workers($cmd$do $ids$
      declare
        v_group bigint := (select groupid from pg_catalog.pg_dist_local_group);
        v_seq regclass := pg_catalog.pg_get_serial_sequence('settle_private.feed_events', 'event_id')::regclass;
        v_last bigint;
      begin
        execute pg_catalog.format('select last_value from %s', v_seq) into v_last;
        if v_group > 0 and v_last < v_group * 281474976710656 then
          execute pg_catalog.format('alter table settle_private.feed_events alter column event_id set minvalue %s set maxvalue %s set start with %s restart with %s',
            v_group * 281474976710656 + 1, (v_group + 1) * 281474976710656, v_group * 281474976710656 + 1,
            v_group * 281474976710656 + 1);
        end if;
      end $ids$ $cmd$) r
   where not r.success;
  if v_failed is not null then
    raise exception using errcode = 'SE031', message = 'could not set the feed''s event_id ranges on every worker', detail = v_failed;
  end if;
  -- The trigger fires on every shard (an earlier version of this script disabled it).
  if exists (select 1 from pg_catalog.pg_trigger
              where tgrelid = 'settle_private.operations'::regclass and tgname = '_990_feed' and tgenabled <> 'A') then
    alter table settle_private.operations enable always trigger _990_feed;
  end if;
end
$$;

-- 4. Delegation that no argument can crash (issue 23). Citus 13.2 (and 14.0) hashes the
-- distribution argument of a delegated call while it plans the call, before any permission
-- check, without testing it for NULL (planner/function_call_delegation.c,
-- ShardPlacementForFunctionColocatedWithDistTable -> FindShardInterval): a constant or bound
-- NULL key crashed the node (signal 11), whatever the caller's role. PostgreSQL's planner runs
-- first and replaces a call of a STRICT, non-set-returning function that has a NULL constant
-- argument by a NULL constant, so Citus never sees such a call. Hence:
--   * only STRICT, non-set-returning functions are delegated by key (the hot path: claim via
--     settle._claim, heartbeat, complete, fail, report_unknown, get; and the two per-key
--     maintenance steps, force-delegated). On Citus a NULL argument to them answers one row
--     of NULLs and runs nothing (on plain PostgreSQL these functions are not STRICT and answer
--     SE001-SE008);
--   * every other function with a `key` argument (inspect, redrive, the private helpers, and
--     any function added later) is propagated without a distribution argument: it runs where
--     it is called, its statements routed by Citus, and is never hashed;
--   * settle.claim has an optional NULL argument (worker), so it cannot be STRICT. On Citus
--     its body moves to settle_private.claim (same name, so its `claim.` qualifiers still
--     resolve), settle._claim is the STRICT delegated entry that carries worker as a one-element
--     array (never NULL itself), and settle.claim becomes a LANGUAGE SQL function with a RETURN
--     body, same signature, defaults, comment and grants, that the planner inlines into the
--     caller's query: `select * from settle.claim(...)` is planned as a call of settle._claim.
--     Its RETURN body is stored parsed, so inlining it needs no USAGE on any other schema.
--   * settle.resolve (00015) likewise (result, error, evidence and expected_status are optional
--     NULLs): its body moves to settle_private.resolve, settle._resolve is the STRICT delegated
--     entry (the four as one-element arrays), settle.resolve the inlined wrapper. Delegated, the
--     resolution runs on the key's worker, in the transaction whose id its audit row records
--     and the failure guard (_resolving_failed, 00015) compares on the shard.
do $$
declare
  v_w record;
  v_body regprocedure;
  v_grantee text;
begin
  for v_w in
    select * from (values
      ('claim', '(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean)',
       '(text, text, jsonb, text, text[], bigint, interval, text[], integer, boolean)',
       'tenant, key, request, principal, scopes, binding_generation, lease, array[worker], max_attempts, rerun_after_unknown',
       $fn$
  create or replace function settle._claim(
    tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint,
    lease interval, worker text[], max_attempts integer, rerun_after_unknown boolean)
  returns settle.claim_result
  language plpgsql
  strict
  security definer
  set search_path = pg_catalog, pg_temp
  as $body$
  begin
    return settle_private.claim(_claim.tenant, _claim.key, _claim.request, _claim.principal, _claim.scopes,
      _claim.binding_generation, _claim.lease, _claim.worker[1], _claim.max_attempts, _claim.rerun_after_unknown);
  end
  $body$;
  comment on function settle._claim(text, text, jsonb, text, text[], bigint, interval, text[], integer, boolean) is
    'Citus only (pg-settle distribute): the delegated entry of settle.claim, STRICT so that a NULL argument never reaches Citus''s routing; worker travels as a one-element array. Call settle.claim.';
$fn$),
      ('resolve', '(text, text, text, integer, text, text, jsonb, jsonb, jsonb, settle.status)',
       '(text, text, text, integer, text, text, jsonb[], jsonb[], jsonb[], settle.status[])',
       'tenant, key, fingerprint, expected_attempt, outcome, reason, array[result], array[error], array[evidence], array[expected_status]',
       $fn$
  create or replace function settle._resolve(
    tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb[],
    error jsonb[], evidence jsonb[], expected_status settle.status[])
  returns settle.resolve_result
  language plpgsql
  strict
  security definer
  set search_path = pg_catalog, pg_temp
  as $body$
  begin
    return settle_private.resolve(_resolve.tenant, _resolve.key, _resolve.fingerprint, _resolve.expected_attempt,
      _resolve.outcome, _resolve.reason, _resolve.result[1], _resolve.error[1], _resolve.evidence[1],
      _resolve.expected_status[1]);
  end
  $body$;
  comment on function settle._resolve(text, text, text, integer, text, text, jsonb[], jsonb[], jsonb[], settle.status[]) is
    'Citus only (pg-settle distribute): the delegated entry of settle.resolve, STRICT so that a NULL argument never reaches Citus''s routing; result, error, evidence and expected_status travel as one-element arrays. Call settle.resolve.';
$fn$)) w(name, sig, entry_sig, call, entry_ddl)
  loop
    v_body := pg_catalog.to_regprocedure('settle_private.' || v_w.name || v_w.sig);
    if v_body is null then
      if pg_catalog.to_regprocedure('settle.' || v_w.name || v_w.sig) is null then
        raise exception using
          errcode = 'SE031',
          message = pg_catalog.format('pg-settle distribute does not know this settle.%s signature', v_w.name),
          detail = pg_catalog.json_build_object('expected', 'settle.' || v_w.name || v_w.sig)::text,
          hint = pg_catalog.format('sql/citus/distribute.sql step 4 must follow the signature of settle.%s (sql/migrations).', v_w.name);
      end if;
      execute pg_catalog.format('alter function settle.%I%s set schema settle_private', v_w.name, v_w.sig);
      v_body := pg_catalog.to_regprocedure('settle_private.' || v_w.name || v_w.sig);
    end if;

    execute v_w.entry_ddl;
    execute pg_catalog.format('alter function settle.%I%s owner to settle_owner', '_' || v_w.name, v_w.entry_sig);

    if pg_catalog.to_regprocedure('settle.' || v_w.name || v_w.sig) is null then
      execute pg_catalog.format('create function settle.%I(%s) returns %s language sql return settle.%I(%s)',
        v_w.name, pg_catalog.pg_get_function_arguments(v_body), pg_catalog.pg_get_function_result(v_body),
        '_' || v_w.name, v_w.call);
      execute pg_catalog.format('alter function settle.%I%s owner to settle_owner', v_w.name, v_w.sig);
      execute pg_catalog.format('comment on function settle.%I%s is %L', v_w.name, v_w.sig,
        pg_catalog.obj_description(v_body, 'pg_proc'));
      -- Whoever could call the body calls the wrapper and the delegated entry instead.
      for v_grantee in
        select distinct a.grantee::regrole::text
          from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         where p.oid = v_body and a.grantee <> 0 and a.grantee <> p.proowner and a.privilege_type = 'EXECUTE'
      loop
        execute pg_catalog.format('grant execute on function settle.%I%s, settle.%I%s to %I',
          v_w.name, v_w.sig, '_' || v_w.name, v_w.entry_sig, v_grantee);
        execute pg_catalog.format('revoke execute on function settle_private.%I%s from %I', v_w.name, v_w.sig, v_grantee);
      end loop;
    end if;
  end loop;
end
$$;

-- 5. Functions: every function of settle and settle_private is propagated to every node; the
-- STRICT ones below are delegated by their `key` argument, colocated with the operations.
do $$
declare
  v_fn record;
  v_delegated constant text[] := array['settle._claim', 'settle.heartbeat', 'settle.complete', 'settle.fail',
    'settle.report_unknown', 'settle.get', 'settle._resolve'];
  v_force constant text[] := array['settle_private._expire_key', 'settle_private._purge_key',
    'settle_private._purge_tombstone', 'settle_private._dead_letter_in_doubt_key'];
  v_failed text;
begin
  for v_fn in
    select p.oid::regprocedure as fn, n.nspname || '.' || p.proname as name, p.proretset, p.prorettype,
           pg_catalog.pg_get_expr(p.proargdefaults, 0) as defaults, p.proacl, p.proowner,
           -- takes or returns the row type of a table Citus does not know (the per-node feed
           -- tables, 3b): Citus refuses to propagate it, so it is created on each worker here
           exists (select 1 from pg_catalog.unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]) || p.prorettype) t(oid)
                     join pg_catalog.pg_type ty on ty.oid = t.oid
                     join pg_catalog.pg_class c on c.oid = ty.typrelid and c.relkind in ('r', 'p')
                    where not exists (select 1 from pg_catalog.pg_dist_partition d where d.logicalrelid = c.oid)) as local_rowtype
      from pg_catalog.pg_proc p
      join pg_catalog.pg_namespace n on n.oid = p.pronamespace
     where n.nspname in ('settle', 'settle_private') and p.prokind = 'f'
     order by p.oid
  loop
    if v_fn.local_rowtype then
      select pg_catalog.string_agg(r.nodename || ':' || r.nodeport || ': ' || r.result, '; ')
        into v_failed
        from run_command_on_workers(pg_catalog.format(
          E'do $fn$ begin\nperform pg_catalog.set_config(''citus.enable_ddl_propagation'', ''off'', true);\nexecute %L;\nexecute %L;\nexecute %L;\n%s\nend $fn$',
          pg_catalog.pg_get_functiondef(v_fn.fn),
          pg_catalog.format('alter function %s owner to %I', v_fn.fn, v_fn.proowner::regrole::text),
          pg_catalog.format('revoke all on function %s from public', v_fn.fn),
          coalesce((select pg_catalog.string_agg(pg_catalog.format('execute %L;',
                              pg_catalog.format('grant execute on function %s to %I', v_fn.fn, g.grantee::regrole::text)), E'\n')
                      from (select distinct a.grantee from pg_catalog.aclexplode(v_fn.proacl) a
                             where a.grantee <> 0 and a.grantee <> v_fn.proowner and a.privilege_type = 'EXECUTE') g), ''))) r
       where not r.success;
      if v_failed is not null then
        raise exception using errcode = 'SE031', message = pg_catalog.format('could not create %s on every worker', v_fn.fn),
          detail = v_failed;
      end if;
    elsif v_fn.name = any (v_delegated || v_force) then
      -- A delegated function must be one the planner folds away when an argument is NULL.
      if v_fn.proretset or v_fn.prorettype = 'record'::regtype or coalesce(v_fn.defaults, '') ~ '\mNULL::' then
        raise exception using
          errcode = 'SE031',
          message = pg_catalog.format('%s cannot be delegated safely on Citus', v_fn.fn),
          detail = pg_catalog.json_build_object('function', v_fn.fn::text, 'returns_set', v_fn.proretset,
            'defaults', v_fn.defaults)::text,
          hint = 'A delegated function is made STRICT: it must return one row of a named type and have no optional NULL argument (see settle._claim in sql/citus/distribute.sql).';
      end if;
      execute pg_catalog.format('alter function %s strict', v_fn.fn);
      perform create_distributed_function(v_fn.fn, 'key', colocate_with := 'settle_private.operations',
        force_delegation := v_fn.name = any (v_force));
    else
      -- Also resets a function delegated by an earlier version of this script.
      perform create_distributed_function(v_fn.fn);
    end if;
  end loop;
end
$$;

-- 6. Function ACLs: no PUBLIC anywhere, the coordinator's grants re-issued (GRANT and REVOKE
-- on distributed functions reach every node).
do $$
declare
  v_fn record;
  v_grantee text;
begin
  for v_fn in
    select p.oid, p.oid::regprocedure as fn, p.proowner, p.proacl
      from pg_catalog.pg_proc p
      join pg_catalog.pg_namespace n on n.oid = p.pronamespace
     where n.nspname in ('settle', 'settle_private') and p.prokind = 'f'
  loop
    execute pg_catalog.format('revoke all on function %s from public', v_fn.fn);
    for v_grantee in
      select distinct a.grantee::regrole::text
        from pg_catalog.aclexplode(v_fn.proacl) a
       where a.grantee <> 0 and a.grantee <> v_fn.proowner and a.privilege_type = 'EXECUTE'
    loop
      execute pg_catalog.format('grant execute on function %s to %s', v_fn.fn, v_grantee);
    end loop;
  end loop;
end
$$;

-- 7. The read views keep the private tables private (issue 23). Citus sends the shard queries
-- of a view to the workers as the calling user, not as the view's owner, so a view that reads
-- settle_private directly needs the caller to hold SELECT on the private tables and their
-- shards, and then the caller could read every tenant's rows without the view. Instead each
-- such view reads its rows through a SECURITY DEFINER function owned by settle_owner
-- (settle_private._view_<name>, its body the view's own query, tenant filter on session_user
-- included): inside it Citus connects as settle_owner. Callers hold SELECT on the views and
-- EXECUTE on these functions, and nothing on settle_private: every private table and every
-- shard is refused to them, on the coordinator and on every worker, as on plain PostgreSQL.
-- The cost: a filter on such a view is applied after the function returned the caller's rows
-- (read one operation with settle.get or settle.inspect).
do $$
declare
  v_view record;
  v_fn text;
  v_columns text;
  v_names text;
  v_grantee text;
begin
  for v_view in
    select c.oid, c.relname, pg_catalog.pg_get_viewdef(c.oid, true) as def
      from pg_catalog.pg_class c
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'settle' and c.relkind = 'v'
       -- views that read a private table directly (not those already reading a function)
       and exists (select 1 from pg_catalog.pg_rewrite r
                     join pg_catalog.pg_depend d on d.classid = 'pg_catalog.pg_rewrite'::regclass and d.objid = r.oid
                     join pg_catalog.pg_class t on t.oid = d.refobjid and d.refclassid = 'pg_catalog.pg_class'::regclass
                     join pg_catalog.pg_namespace tn on tn.oid = t.relnamespace
                    where r.ev_class = c.oid and tn.nspname = 'settle_private' and t.relkind in ('r', 'p'))
     order by c.relname
  loop
    v_fn := pg_catalog.format('settle_private.%I', '_view_' || v_view.relname);
    select pg_catalog.string_agg(pg_catalog.format('%I %s', a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod)), ', ' order by a.attnum),
           pg_catalog.string_agg(pg_catalog.format('v.%I', a.attname), ', ' order by a.attnum)
      into v_columns, v_names
      from pg_catalog.pg_attribute a
     where a.attrelid = v_view.oid and a.attnum > 0 and not a.attisdropped;
    execute pg_catalog.format(
      'create or replace function %s() returns table (%s) language plpgsql stable security definer '
      'set search_path = pg_catalog, pg_temp as %L',
      v_fn, v_columns,
      E'#variable_conflict use_column\nbegin\n  return query ' || pg_catalog.rtrim(v_view.def, E'; \n') || E';\nend');
    execute pg_catalog.format('alter function %s() owner to settle_owner', v_fn);
    execute pg_catalog.format('comment on function %s() is %L', v_fn,
      pg_catalog.format('Citus only (pg-settle distribute): the rows of view settle.%I, read as settle_owner. Read the view.', v_view.relname));
    execute pg_catalog.format('revoke all on function %s() from public', v_fn);
    for v_grantee in
      select distinct a.grantee::regrole::text
        from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
       where c.oid = v_view.oid and a.grantee <> 0 and a.grantee <> c.relowner and a.privilege_type = 'SELECT'
    loop
      execute pg_catalog.format('grant execute on function %s() to %I', v_fn, v_grantee);
    end loop;
    perform create_distributed_function((v_fn || '()')::regprocedure);
    execute pg_catalog.format('create or replace view settle.%I as select %s from %s() v', v_view.relname, v_names, v_fn);
  end loop;
end
$$;

-- 8. settle.metrics (00010, 00015): its gauges come from SQL functions (_metrics,
-- _upkeep_metrics) that are one query whose counting subqueries read the outer row w (the time,
-- the window and the caller's tenants). Citus cannot plan a subquery over a distributed table
-- that refers to an outer query ("complex joins are only supported when ..."), so on Citus the
-- same query runs in PL/pgSQL with w read first into a record: each subquery then takes w's
-- fields as parameters and is planned on its own (a multi-shard count). The counting text stays
-- the migrations' (taken from each function here), so it cannot drift. _metrics in a shape this
-- step does not recognise stops distribute (SE031); every other SQL function of settle_private
-- named *metrics in that shape is converted the same way.
do $$
declare
  v_fn record;
  v_parts text[];
begin
  for v_fn in
    select p.oid::regprocedure as fn, p.prosrc as src, p.proname as name
      from pg_catalog.pg_proc p
      join pg_catalog.pg_namespace n on n.oid = p.pronamespace
     where n.nspname = 'settle_private' and p.proname like '\_%metrics' and p.pronargs = 0
       and p.prolang = (select oid from pg_catalog.pg_language where lanname = 'sql')
     order by p.proname
  loop
    v_parts := pg_catalog.regexp_match(v_fn.src, '^\s*(select .*)\s+from \((select [^()]*(\([^()]*\)[^()]*)*)\) w\s*;?\s*$');
    if v_parts is null then
      if v_fn.name = '_metrics' then
        raise exception using errcode = 'SE031',
          message = 'pg-settle distribute does not know the shape of settle_private._metrics()',
          hint = 'sql/citus/distribute.sql step 8 expects "select ... from (select ... ) w" (00010).';
      end if;
      continue;  -- no outer row: Citus plans it as it is
    end if;
    execute pg_catalog.format(
      'create or replace function %s returns table (%s) language plpgsql stable security definer '
      'set search_path = pg_catalog, pg_temp set jit = off as %L',
      v_fn.fn,
      (select pg_catalog.string_agg(pg_catalog.format('%I %s', u.n, pg_catalog.format_type(u.t, null)), ', ' order by u.i)
         from pg_catalog.pg_proc p,
              rows from (pg_catalog.unnest(p.proargnames), pg_catalog.unnest(p.proallargtypes), pg_catalog.unnest(p.proargmodes)) with ordinality u(n, t, m, i)
        where p.oid = v_fn.fn and u.m = 't'),
      E'#variable_conflict use_column\ndeclare\n  w record;\nbegin\n  select * into w from (' || v_parts[2]
        || E') x;\n  return query ' || v_parts[1] || E';\nend');
  end loop;
end
$$;

-- 9. A CASE over a STABLE function in UPDATE ... SET is refused by Citus ("non-IMMUTABLE
-- functions are not allowed in CASE or COALESCE statements", SCALE-OUT.md), also on the worker
-- running a delegated call. settle_private._revoke_operation (00012) builds the revoked
-- operation's error with jsonb_build_object (STABLE) inside such a CASE: every call that finds
-- its operation under a revoked binding failed on Citus (found by the model-based test on
-- Citus). On Citus the CASE is computed into a PL/pgSQL variable first, the rest of the body
-- unchanged. If the text is not found (the function was rewritten), nothing is changed here:
-- test/citus/model-based.test.ts shows whether the new text works on Citus.
do $$
declare
  v_src text;
  v_case text;
  v_new text;
begin
  select p.prosrc into v_src from pg_catalog.pg_proc p
   where p.oid = pg_catalog.to_regprocedure('settle_private._revoke_operation(settle_private.operations, bigint, timestamptz, text)');
  if v_src is null or v_src like '%v_citus_error%' then
    return;
  end if;
  v_case := (pg_catalog.regexp_match(v_src, '\n\s*error = (case when .*? else op\.error end),'))[1];
  if v_case is null or pg_catalog.strpos(v_src, 'v_effect boolean;') = 0
     or pg_catalog.strpos(v_src, E'\n  update settle_private.operations o\n') = 0 then
    return;
  end if;
  v_new := pg_catalog.replace(v_src, 'error = ' || v_case || ',', 'error = v_citus_error,');
  v_new := pg_catalog.replace(v_new, 'v_effect boolean;', E'v_effect boolean;\n  v_citus_error jsonb;');
  v_new := pg_catalog.regexp_replace(v_new, E'\n  update settle_private.operations o\n',
    E'\n  v_citus_error := ' || pg_catalog.replace(v_case, '\', '\\') || E';\n  update settle_private.operations o\n');
  execute pg_catalog.format(
    'create or replace function settle_private._revoke_operation(op settle_private.operations, below bigint, as_of timestamptz, actor text) '
    'returns settle_private.operations language plpgsql set search_path = pg_catalog, pg_temp as %L', v_new);
end
$$;

-- 10. settle_private._access (00012), the access verdict of every call (tenant binding, then
-- revocation floor), reads the two reference tables. Through Citus that costs a router plan's
-- execution (the shard query deparsed and run again) at every call, three times per cycle. Every
-- node holds a complete placement of a reference table, written synchronously with every change
-- (two-phase commit), under the same shard name on every node: _access reads that placement as
-- a plain table, which PostgreSQL plans once per session. Applied only when every node of the
-- cluster holds both placements (a node added later: run `pg-settle distribute` again; it
-- also follows a re-created reference table's new shard name).
do $$
declare
  v_src text;
  v_new text;
  v_table text;
  v_shard bigint;
begin
  select p.prosrc into v_src from pg_catalog.pg_proc p
   where p.oid = pg_catalog.to_regprocedure('settle_private._access(text, text)');
  if v_src is null then
    return;
  end if;
  v_new := v_src;
  foreach v_table in array array['tenant_bindings', 'binding_floors'] loop
    select s.shardid into v_shard from pg_catalog.pg_dist_shard s
     where s.logicalrelid = pg_catalog.to_regclass('settle_private.' || v_table);
    if v_shard is null
       or exists (select 1 from pg_catalog.pg_dist_node d
                   where d.noderole = 'primary' and d.isactive
                     and not exists (select 1 from pg_catalog.pg_dist_placement pl
                                      where pl.shardid = v_shard and pl.groupid = d.groupid)) then
      return;
    end if;
    v_new := pg_catalog.regexp_replace(v_new, 'settle_private\.' || v_table || '(_[0-9]+)?\M',
      'settle_private.' || v_table || '_' || v_shard, 'g');
  end loop;
  if v_new <> v_src then
    execute pg_catalog.replace(pg_catalog.pg_get_functiondef('settle_private._access(text, text)'::regprocedure), v_src, v_new);
  end if;
end
$$;

-- 11. The hot path's statements read the access verdict through settle_private._access (issue
-- 23, item 5). On plain PostgreSQL claim, complete and _observe (00007, 00009) copy _access's
-- expression into their first statements (one statement costs less than a statement and a
-- function call there, docs/performance.md). On Citus every statement that names a Citus table
-- is planned again at every call, on the worker running the delegated call too (by Citus's design
-- for a statement over several tables; for a single-table one by a bug of Citus 13.2.2, see "Known
-- Citus bugs" in docs/scale-out.md), and each copied expression adds two subqueries over reference
-- tables to that planning. Here the copies become calls of _access (step 10: a plain read of the
-- local placements, planned once per session), the same verdict from the same snapshot (_access is
-- STABLE). Only after step 10 applied (_access reads no Citus table: a shard query must not start a
-- distributed one). The two forms copied: the binding alone (`else 0`, _access(tenant, null)),
-- and binding then floor (_access(tenant, principal)).
do $$
declare
  v_fn record;
  v_new text;
begin
  if not exists (select 1 from pg_catalog.pg_proc p
                  where p.oid = pg_catalog.to_regprocedure('settle_private._access(text, text)')
                    and p.prosrc ~ 'settle_private\.tenant_bindings_[0-9]+\M') then
    return;
  end if;
  for v_fn in
    select p.oid, p.prosrc
      from pg_catalog.pg_proc p
      join pg_catalog.pg_namespace n on n.oid = p.pronamespace
     where n.nspname in ('settle', 'settle_private') and p.prokind = 'f'
       and p.oid <> 'settle_private._access(text, text)'::regprocedure
       and p.prosrc ~ 'case when exists \(select 1 from settle_private\.tenant_bindings '
  loop
    v_new := pg_catalog.regexp_replace(v_fn.prosrc,
      'case when exists \(select 1 from settle_private\.tenant_bindings (\w+)[ ]*(--[^\n]*)?\n\s*'
      || 'where \(\1\.role_oid = to_regrole\(quote_ident\(session_user::text\)\)::oid or \1\.role_name = session_user::text\)\s*'
      || 'and not \((\w+)\.tenant = any \(\1\.tenants\)\)\) then -1\s*'
      || 'else coalesce\(\(select f\.below_generation from settle_private\.binding_floors f\s*'
      || 'where f\.tenant = \3\.tenant and f\.principal = \3\.principal\), 0\) end',
      'settle_private._access(\3.tenant, \3.principal) /* pg-settle distribute, step 11 */', 'g');
    v_new := pg_catalog.regexp_replace(v_new,
      'case when exists \(select 1 from settle_private\.tenant_bindings (\w+)[ ]*(--[^\n]*)?\n\s*'
      || 'where \(\1\.role_oid = to_regrole\(quote_ident\(session_user::text\)\)::oid or \1\.role_name = session_user::text\)\s*'
      || 'and not \((\w+)\.tenant = any \(\1\.tenants\)\)\) then -1\s*'
      || 'else 0 end',
      'settle_private._access(\3.tenant, null) /* pg-settle distribute, step 11 */', 'g');
    if v_new <> v_fn.prosrc then
      execute pg_catalog.replace(pg_catalog.pg_get_functiondef(v_fn.oid), v_fn.prosrc, v_new);
    end if;
  end loop;
end
$$;

-- Citus re-creates a replaced view on the workers without its grants: re-issue every view's
-- grants from the coordinator (GRANT on a view reaches every node).
do $$
declare
  v_grant record;
begin
  for v_grant in
    select distinct c.relname, a.grantee::regrole::text as grantee
      from pg_catalog.pg_class c
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace
      cross join lateral pg_catalog.aclexplode(c.relacl) a
     where n.nspname = 'settle' and c.relkind = 'v' and a.grantee <> 0 and a.grantee <> c.relowner
       and a.privilege_type = 'SELECT'
  loop
    execute pg_catalog.format('grant select on settle.%I to %I', v_grant.relname, v_grant.grantee);
  end loop;
end
$$;

-- Nothing on settle_private for the callers (earlier versions of this script granted the readers
-- SELECT on the private tables with a permissive row policy: taken back).
do $$
declare
  v_table record;
begin
  for v_table in
    select c.oid::regclass as rel
      from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'settle_private' and c.relkind in ('r', 'p')
  loop
    execute pg_catalog.format('revoke all on %s from settle_app, settle_readonly, settle_admin', v_table.rel);
    execute pg_catalog.format('drop policy if exists readers_of_views on %s', v_table.rel);
    execute pg_catalog.format('drop policy if exists own_binding on %s', v_table.rel);
  end loop;
end
$$;
revoke all on schema settle_private from settle_app, settle_readonly, settle_admin;

-- What is distributed now (printed by pg-settle distribute).
select
  (select pg_catalog.count(*) from pg_catalog.pg_dist_partition p
     where p.logicalrelid::regclass::text like 'settle\_private.%' and p.partmethod = 'h')::integer as tables,
  (select pg_catalog.count(*) from pg_catalog.pg_dist_object o
     join pg_catalog.pg_proc f on o.classid = 'pg_catalog.pg_proc'::regclass and f.oid = o.objid
     join pg_catalog.pg_namespace n on n.oid = f.pronamespace
    where n.nspname in ('settle', 'settle_private'))::integer as functions,
  (select pg_catalog.count(*) from pg_catalog.pg_dist_object o
     join pg_catalog.pg_proc f on o.classid = 'pg_catalog.pg_proc'::regclass and f.oid = o.objid
     join pg_catalog.pg_namespace n on n.oid = f.pronamespace
    where n.nspname in ('settle', 'settle_private') and o.distribution_argument_index is not null)::integer as delegated,
  (select pg_catalog.count(*) from pg_catalog.pg_dist_node d
    where d.noderole = 'primary' and d.groupid <> 0 and d.isactive)::integer as workers;
