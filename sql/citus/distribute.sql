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
--   4. Every function in settle and settle_private is distributed (propagated to every node):
--      those with a `key text` argument with distribution_arg_name 'key', colocated with the
--      operations, so `select ... from settle.claim(...)` runs on the worker holding the key;
--      the per-key maintenance steps (called once per key by expire_leases / purge from the
--      coordinator) with force_delegation, so that even that nested call runs on the worker.
--   5. Function ACLs are made identical on every node: PUBLIC loses EXECUTE everywhere (a
--      function propagated after creation kept PUBLIC on the workers, and the coordinator does
--      not check EXECUTE before delegating a call: the worker's ACL is the one that counts).
--   6. The read views run their shard queries as the caller on the workers: settle_readonly
--      and settle_admin get SELECT on exactly the columns the views show (never lease_token)
--      and a read-only row policy. They still cannot write, and still cannot see a lease token.

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
  foreach v_table in array array['settle_private.operations', 'settle_private.attempts', 'settle_private.audit_log',
                                 'settle_private.audit_overflow'] loop
    if not exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = v_table::regclass) then
      perform create_distributed_table(v_table, 'key',
        colocate_with := case when v_table = 'settle_private.operations' then 'none' else 'settle_private.operations' end);
    end if;
  end loop;
  -- Access (00012): small, global, rarely written, read by every call: reference tables, copied
  -- to every node, so that a delegated call reads them on its worker.
  foreach v_table in array array['settle_private.tenant_bindings', 'settle_private.binding_floors', 'settle_private.admin_log'] loop
    if pg_catalog.to_regclass(v_table) is not null
       and not exists (select 1 from pg_catalog.pg_dist_partition where logicalrelid = v_table::regclass) then
      perform create_reference_table(v_table);
    end if;
  end loop;
end
$$;

-- 4. Functions. A `key text` argument makes a function delegated by key.
do $$
declare
  v_fn record;
  v_force text[] := array['settle_private._expire_key', 'settle_private._purge_key', 'settle_private._purge_tombstone'];
begin
  for v_fn in
    select p.oid::regprocedure as fn, n.nspname || '.' || p.proname as name,
           p.proargnames is not null and 'key' = any (p.proargnames)
             and p.proargtypes[pg_catalog.array_position(p.proargnames, 'key') - 1] = 'text'::regtype as keyed
      from pg_catalog.pg_proc p
      join pg_catalog.pg_namespace n on n.oid = p.pronamespace
     where n.nspname in ('settle', 'settle_private') and p.prokind = 'f'
     order by p.oid
  loop
    if v_fn.keyed then
      perform create_distributed_function(v_fn.fn, 'key', colocate_with := 'settle_private.operations',
        force_delegation := v_fn.name = any (v_force));
    else
      perform create_distributed_function(v_fn.fn);
    end if;
  end loop;
end
$$;

-- 5. Function ACLs: no PUBLIC anywhere, the coordinator's grants re-issued (GRANT and REVOKE
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

-- 6. Readers of the views: the columns the views show, read-only, on every shard.
grant usage on schema settle_private to settle_readonly, settle_admin;
do $$
declare
  v_table text;
  v_columns text;
begin
  foreach v_table in array array['settle_private.operations', 'settle_private.attempts', 'settle_private.audit_log',
                                 'settle_private.audit_overflow'] loop
    select pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' order by a.attnum) into v_columns
      from pg_catalog.pg_attribute a
     where a.attrelid = v_table::regclass and a.attnum > 0 and not a.attisdropped and a.attname <> 'lease_token';
    execute pg_catalog.format('grant select (%s) on %s to settle_readonly, settle_admin', v_columns, v_table);
    -- The views keep a login role bound to tenants (settle.grant_tenant) to their rows; this
    -- policy cannot (a shard query may not call a function that reads a reference table:
    -- "cannot execute a distributed query from a query on a shard"), so on Citus a bound reader
    -- querying these tables directly sees every tenant's rows (docs/protocol.md section 12).
    if not exists (select 1 from pg_catalog.pg_policy
                    where polrelid = v_table::regclass and polname = 'readers_of_views') then
      execute pg_catalog.format(
        'create policy readers_of_views on %s for select to settle_readonly, settle_admin using (true)', v_table);
    end if;
  end loop;
end
$$;
-- settle.admin_log reads the admin log as the reader on Citus.
grant select on settle_private.admin_log to settle_readonly, settle_admin;
do $$
begin
  if not exists (select 1 from pg_catalog.pg_policy
                  where polrelid = 'settle_private.admin_log'::regclass and polname = 'readers_of_views') then
    create policy readers_of_views on settle_private.admin_log for select to settle_readonly, settle_admin using (true);
  end if;
end
$$;

-- The views read the caller's own tenant binding (session_user): on the shards that read runs
-- as the caller too, who may see that one row and nothing else.
do $$
begin
  if pg_catalog.to_regclass('settle_private.tenant_bindings') is not null then
    grant select on settle_private.tenant_bindings to settle_readonly, settle_admin;
    if not exists (select 1 from pg_catalog.pg_policy
                    where polrelid = 'settle_private.tenant_bindings'::regclass and polname = 'own_binding') then
      create policy own_binding on settle_private.tenant_bindings for select to settle_readonly, settle_admin
        using (role_name = session_user::text);
    end if;
  end if;
end
$$;

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
