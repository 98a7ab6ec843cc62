-- 00001: roles and schemas.
--
-- Why: pg-settle's guarantees must hold for every writer, so the engine owns its objects
-- through a non-login role and hands callers nothing but EXECUTE on an API schema.
--   settle_owner    (NOLOGIN; on Citus LOGIN, node to node only) owns every schema, table,
--                   function and view.
--   settle_app      may call the application API (claim, heartbeat, complete, fail,
--                   report_unknown, get, fingerprint). It holds no table privilege at all.
--   settle_readonly may read the `settle` views and call get/fingerprint.
--   settle_admin    may call the maintenance API (expire_leases, redrive, purge) and read views.
--   settle_consumer may read the settlement feed of the consumers it is given (00013).
--   settle_reconciler may resolve operations that need reconciliation (00014): the
--                   application's reconciler, least privilege.
-- Grant the last three to your own login roles (`grant settle_app to my_service;`).
--
-- Every role is created here, in the first migration, and used only by later ones: on Citus a
-- role created and granted in the same transaction is unknown to the workers' other
-- connections (the feed's role, created in 00013, failed the Citus migration that way).
-- Roles are cluster-wide, while migrations run per database: several databases in one
-- cluster (test databases, staging) may migrate at the same moment, so role creation
-- tolerates a concurrent creator instead of failing.

do $$
begin
  if pg_catalog.getdatabaseencoding() <> 'UTF8' then
    raise exception using
      errcode = 'SE030',
      message = 'pg-settle requires a UTF8 database',
      detail = pg_catalog.json_build_object('encoding', pg_catalog.getdatabaseencoding())::text,
      hint = 'Create the database with ENCODING ''UTF8''.';
  end if;
end
$$;

do $$
declare
  v_role text;
begin
  foreach v_role in array array['settle_owner', 'settle_app', 'settle_readonly', 'settle_admin', 'settle_consumer', 'settle_reconciler'] loop
    begin
      if not exists (select 1 from pg_catalog.pg_roles where rolname = v_role) then
        execute format('create role %I nologin', v_role);
      end if;
      -- On Citus the owner must be able to log in, node to node only: Citus runs the
      -- statements of a call it does not delegate (inside BEGIN ... COMMIT, the maintenance
      -- scans, SECURITY DEFINER reads) on the coordinator and connects to the workers as the
      -- current user, settle_owner, also while these migrations propagate their DDL. It gets
      -- no password; pg_hba.conf admits it from the cluster's nodes only (docs/scale-out.md).
      if v_role = 'settle_owner' and exists (select 1 from pg_catalog.pg_extension where extname = 'citus')
         and not (select r.rolcanlogin from pg_catalog.pg_roles r where r.rolname = v_role) then
        execute format('alter role %I login', v_role);
      end if;
    exception when duplicate_object or unique_violation then
      null; -- another database of this cluster created it a moment ago
    end;
  end loop;
end
$$;

-- The migrating user must be able to act as the owner (a superuser always can; a
-- CREATEROLE deployment user needs the membership). migrate() (src/db/migrate.ts) revokes it
-- again when the migrations end: no login keeps the owner's rights.
do $$
begin
  if not pg_catalog.pg_has_role(current_user, 'settle_owner', 'MEMBER') then
    execute format('grant settle_owner to %I', current_user);
  end if;
end
$$;

create schema settle authorization settle_owner;
comment on schema settle is
  'pg-settle public API: functions and read-only views. Tables live in settle_private and are not an interface.';

create schema settle_private authorization settle_owner;
comment on schema settle_private is
  'pg-settle private tables and helpers. Not an interface: use the functions in schema settle.';

revoke all on schema settle from public;
revoke all on schema settle_private from public;

-- Functions created by the owner are not executable by PUBLIC; grants are explicit.
alter default privileges for role settle_owner revoke execute on functions from public;
