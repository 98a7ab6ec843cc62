-- 00007: access: tenant binding of login roles, and revocation of authorization bindings.
--
-- Why: the database cannot authenticate the principal a service acts for, but it knows the
-- login role that connected (session_user, which SET ROLE does not change) and it can hold two
-- facts an administrator gives it:
--   * tenant bindings: a login role that holds tenant grants reaches only those tenants
--     (claim, observations, heartbeat, get, inspect, the views); any other tenant is refused
--     with SE013 before anything is read, so nothing is disclosed. A role with no binding at
--     all is a trusted multi-tenant service. Revoking a role's last tenant leaves it bound to
--     none (fail closed); settle.revoke_tenant(role, NULL) unbinds it;
--   * revocation floors: settle.revoke_binding(tenant, principal, below_generation) refuses,
--     from its commit on, every call that presents a binding generation below the floor
--     (reason binding_revoked, the presented payload kept in the audit log as evidence), and
--     an operation reserved under a revoked generation that is not completed can no longer
--     complete: it moves to `conflict` (error binding_revoked) at its next touch, under its
--     row lock (settle_private._revoke_operation).
-- The tables (settle_private.tenant_bindings, binding_floors, admin_log) are in 00002; on a
-- sharded cluster they are reference tables (copied to every node), read by the delegated call
-- on the node of its key. The administrative changes are logged in settle_private.admin_log
-- (view settle.admin_log). Each check lives here once; the API functions call it, and each
-- call's refusal answer is written next to that call (settle_private._claim_refused in 00008,
-- _heartbeat_revoked in 00009, _observation_revoked in 00010). It comes before every API call
-- because every call checks access first; settle_private._visible_tenants, the tenant filter of
-- the views and the maintenance calls, is here for the same reason.

set local role settle_owner;

-- ---------------------------------------------------------------------------------------
-- The checks every call makes. PL/pgSQL, called as plain assignments: each keeps its index
-- probes planned for the session. (As SQL functions they would not be inlined, since
-- their bodies hold a subquery, and PostgreSQL would parse and plan them again in every
-- transaction: measured at 15-20% of the claim + complete cycle, docs/performance.md.)
-- ---------------------------------------------------------------------------------------

-- The access verdict of one call, both checks in one query: -1 when the connected login role
-- holds tenant grants and not `tenant`'s (the caller raises SE013: _refuse_tenant); otherwise
-- the revocation floor of (tenant, principal) (0: nothing revoked; principal NULL: 0).
-- settle.claim (00008) and the observations (00010) evaluate the same expression inside their
-- first statement, which also reads their operation row: one executor start for both
-- (docs/performance.md). It is written out there rather than called as an inlinable SQL
-- function because Citus refuses a parameterized query on a SQL function over distributed or
-- reference tables; test/engine/access-copies.test.ts holds the copies equal.
create function settle_private._access(tenant text, principal text)
returns bigint
language plpgsql
stable
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
  v_verdict bigint;
begin
  select case when exists (select 1 from settle_private.tenant_bindings b
                            where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (_access.tenant = any (b.tenants))) then -1
              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _access.tenant and f.principal = _access.principal), 0) end
    into v_verdict;
  return v_verdict;
end
$$;

-- May the connected login role reach `tenant`? True for a role without a binding.
create function settle_private._tenant_ok(tenant text)
returns boolean
language plpgsql
stable
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  return settle_private._access(_tenant_ok.tenant, null) >= 0;
end
$$;

-- The tenants the connected login may reach: NULL for a login without a binding (a trusted
-- multi-tenant service), else the tenants every binding row matching it lists (by OID, or by
-- the recorded name: see settle_private.tenant_bindings; empty when bound to none). The one
-- rule the views, settle.metrics and the maintenance calls apply (docs/protocol.md §12); settle_private._access (above)
-- matches the login to its bindings the same way.
-- SECURITY DEFINER: the views call it as their reader, who cannot read the bindings.
create function settle_private._visible_tenants()
returns text[]
language plpgsql
stable
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_me oid := to_regrole(quote_ident(session_user::text))::oid;
  v_rows integer;
  v_tenants text[];
begin
  select count(*), array(select t from (select distinct u.t from settle_private.tenant_bindings b1, unnest(b1.tenants) as u(t)
                                          where b1.role_oid = v_me or b1.role_name = session_user::text) d
                          where not exists (select 1 from settle_private.tenant_bindings b2
                                             where (b2.role_oid = v_me or b2.role_name = session_user::text)
                                               and not (d.t = any (b2.tenants)))
                          order by 1)
    into v_rows, v_tenants
    from settle_private.tenant_bindings b
   where b.role_oid = v_me or b.role_name = session_user::text;
  return case when v_rows > 0 then v_tenants end;
end
$$;

-- The revocation floor of (tenant, principal): generations below it are revoked (0: none).
-- PL/pgSQL for the same reason as _tenant_ok.
create function settle_private._floor(tenant text, principal text)
returns bigint
language plpgsql
stable
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  return coalesce((select f.below_generation from settle_private.binding_floors f
                    where f.tenant = _floor.tenant and f.principal = _floor.principal), 0);
end
$$;

-- A bound login (settle_private._visible_tenants() not NULL) asked for something beyond its
-- tenants that names no tenant of its own (an engine-wide setting, unbinding a role, the
-- binding of a role that reaches other tenants): SE019, before anything is read or written.
create function settle_private._refuse_bound(call text, detail jsonb)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise log 'pg-settle audit: %', jsonb_build_object('event', 'bound_refused', 'call', call,
    'role', session_user::text, 'at', clock_timestamp()) || detail;
  perform settle_private._raise('SE019', 'not allowed to a login bound to tenants', jsonb_build_object('call', call),
    'A login bound to tenants acts on those tenants only; an unbound settle_admin login makes engine-wide changes (docs/protocol.md section 12).');
end
$$;

-- SE013, the same words whatever the tenant holds (nothing is disclosed). The refusal cannot
-- be an audit row: the error rolls back the caller's transaction, and the row with it. It is
-- written to the server log instead (RAISE LOG, which survives the rollback).
create function settle_private._refuse_tenant(tenant text, key text, call text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise log 'pg-settle audit: %', jsonb_build_object('event', 'tenant_refused', 'call', call,
    'role', session_user::text, 'tenant', tenant, 'key', key, 'at', clock_timestamp());
  perform settle_private._raise('SE013', 'tenant not granted to this role',
    jsonb_build_object('tenant', tenant),
    'This login role is bound to other tenants (settle.grant_tenant); connect as the role that serves this tenant.');
end
$$;

-- What an observation, claim or read presented, for the audit log, bounded as a whole: when
-- the JSON text of fingerprint, principal, scopes, generation and payload together exceeds
-- evidence_bytes (8 KiB), the scopes and the payload are kept as their size and SHA-256 (the
-- fingerprint, principal and generation, at most ~400 bytes, stay readable). The whole is bounded because 64
-- scopes of 128 bytes are 8 KiB on their own, and were not covered by the payload's cap.
create function settle_private._presented(
  fingerprint text, principal text, scopes text[], binding_generation bigint, payload_name text, payload jsonb)
returns jsonb
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_full jsonb := jsonb_strip_nulls(jsonb_build_object(
    'fingerprint', fingerprint, 'principal', principal, 'scopes', to_jsonb(scopes),
    'binding_generation', binding_generation));
  v_digest constant text := 'sha256';
begin
  if payload is not null then
    if pg_column_size(payload) <= 8 * settle_private._limit('evidence_bytes')
       and octet_length(payload::text) <= settle_private._limit('evidence_bytes') then
      v_full := v_full || jsonb_build_object(payload_name, payload);
    else
      v_full := v_full || jsonb_build_object(payload_name || '_truncated', jsonb_build_object(
        'bytes', octet_length(payload::text), v_digest, encode(sha256(convert_to(payload::text, 'UTF8')), 'hex')));
    end if;
  end if;
  if octet_length(v_full::text) <= settle_private._limit('evidence_bytes') then
    return v_full;
  end if;
  v_full := v_full - 'scopes' - payload_name;
  if scopes is not null then
    v_full := v_full || jsonb_build_object('scopes_truncated', jsonb_build_object(
      'count', cardinality(scopes), 'bytes', octet_length(to_jsonb(scopes)::text),
      v_digest, encode(sha256(convert_to(to_jsonb(scopes)::text, 'UTF8')), 'hex')));
  end if;
  if payload is not null and not (v_full ? (payload_name || '_truncated')) then
    v_full := v_full || jsonb_build_object(payload_name || '_truncated', jsonb_build_object(
      'bytes', octet_length(payload::text), v_digest, encode(sha256(convert_to(payload::text, 'UTF8')), 'hex')));
  end if;
  return v_full;
end
$$;

-- An operation reserved under a revoked generation (op.binding_generation < floor) that is not
-- completed: end its lease and current attempt (end_reason binding_revoked) and raise its status
-- to `conflict` (a failed operation stays failed: it may not move down, and it can no longer
-- complete because every call presenting its generation is refused). Caller holds the row lock.
-- Idempotent: an operation already converted is returned unchanged.
create function settle_private._revoke_operation(op settle_private.operations, below bigint, as_of timestamptz, actor text)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations := op;
  v_effect boolean;
begin
  if op.status = 'completed' or op.binding_generation >= below
     or (op.lease_token is null and settle_private._rank(op.status) >= settle_private._rank('conflict')) then
    return op;
  end if;
  -- Could an effect have happened? Yes unless every attempt ended in a recorded failure (the
  -- status itself aside: a conversion records what the attempts say).
  v_effect := settle_private._may_have_taken_effect(op.tenant, op.key, 'pending', op.attempt);
  if op.lease_token is not null then
    perform settle_private._end_attempt(op.tenant, op.key, op.attempt, as_of, 'binding_revoked');
  end if;
  update settle_private.operations o
     set status = case when settle_private._rank(op.status) < settle_private._rank('conflict')
                       then 'conflict'::settle.status else op.status end,
         error = case when settle_private._rank(op.status) < settle_private._rank('conflict')
                      then jsonb_build_object('code', 'binding_revoked', 'below_generation', below,
                                              'status_before', op.status::text, 'may_have_taken_effect', v_effect)
                      else op.error end,
         lease_token = null, lease_expires_at = null, updated_at = as_of
   where o.tenant = op.tenant and o.key = op.key
  returning * into v_op;
  perform settle_private._audit(op.tenant, op.key, as_of, 'revoke', 'binding_revoked', op.attempt, op.status, v_op.status,
    actor, jsonb_build_object('below_generation', below, 'binding_generation', op.binding_generation,
                              'may_have_taken_effect', v_effect));
  return v_op;
end
$$;

-- Lock (tenant, key) and convert it if it is reserved under a revoked generation of `principal`
-- (`below`: its floor). Used by the calls that decide on a plain read and only then find that
-- the operation they touched is revoked. No row: nothing to do.
create function settle_private._revoke_touch(tenant text, key text, principal text, below bigint, as_of timestamptz, actor text)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_op settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _revoke_touch.tenant and o.key = _revoke_touch.key
   for update;
  if found and v_op.principal = _revoke_touch.principal then
    v_op := settle_private._revoke_operation(v_op, _revoke_touch.below, _revoke_touch.as_of, _revoke_touch.actor);
  end if;
  return v_op;
end
$$;

-- `op` (locked by the caller) after a touch by a call presenting `principal`, whose floor is
-- `below`: converted if the operation's own reservation is revoked. The floor of another
-- principal (a stranger presenting a different binding) is looked up here.
create function settle_private._revoke_on_touch(op settle_private.operations, principal text, below bigint, as_of timestamptz)
returns settle_private.operations
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_below bigint := case when op.principal = _revoke_on_touch.principal then _revoke_on_touch.below
                         else settle_private._floor(op.tenant, op.principal) end;
begin
  if op.binding_generation < v_below then
    return settle_private._revoke_operation(op, v_below, as_of, null);
  end if;
  return op;
end
$$;

-- ---------------------------------------------------------------------------------------
-- settle.grant_tenant / settle.revoke_tenant
-- ---------------------------------------------------------------------------------------

create function settle_private._check_login_role(role text)
returns oid
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_oid oid;
begin
  select r.oid into v_oid from pg_catalog.pg_roles r where r.rolname = _check_login_role.role and r.rolcanlogin;
  if v_oid is null then
    perform settle_private._raise('SE008', 'role must be an existing login role',
      jsonb_build_object('field', 'role', 'role', role),
      'Tenant grants bind the login role a service connects as (session_user), not a group role such as settle_app.');
  end if;
  return v_oid;
end
$$;

-- The binding rows of `role` (named as an administrator names it): the row of its OID, and the
-- rows recorded under its name whose role no longer exists (a dropped role: the name is the
-- only key left). Before it, every row's recorded name is refreshed from the catalog, so that
-- a rename is followed and a name a rename set free binds nobody any more.
create function settle_private._binding_rows_of(role text)
returns table (role_oid oid, tenants text[])
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_oid oid := (select r.oid from pg_catalog.pg_roles r where r.rolname = _binding_rows_of.role);
  -- The catalog is read into variables, never joined into a statement on the bindings: on Citus
  -- they are a reference table and the statement would be sent to every node with pg_roles
  -- expanded to pg_authid ("permission denied for table pg_authid").
  v_roles oid[] := array(select r.oid from pg_catalog.pg_roles r);
  v_b record;
  v_name text;
begin
  for v_b in select b.role_oid, b.role_name from settle_private.tenant_bindings b where b.role_oid = any (v_roles) loop
    v_name := (select r.rolname from pg_catalog.pg_roles r where r.oid = v_b.role_oid);
    if v_name <> v_b.role_name then
      update settle_private.tenant_bindings b set role_name = v_name where b.role_oid = v_b.role_oid;
    end if;
  end loop;
  return query
    select b.role_oid, b.tenants from settle_private.tenant_bindings b
     where b.role_oid = v_oid
        or (b.role_name = _binding_rows_of.role and not (b.role_oid = any (v_roles)))
     order by b.role_oid
     for update;
end
$$;

-- A bound administrator (`mine`: its tenants) may change the binding of `role` only when the
-- role is bound already and reaches none but its tenants: binding a multi-tenant service or
-- unbinding a role would act on other tenants' traffic (SE019).
create function settle_private._check_role_within(role text, mine text[], call text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if not exists (select 1 from settle_private._binding_rows_of(_check_role_within.role))
     or exists (select 1 from settle_private._binding_rows_of(_check_role_within.role) r where not (r.tenants <@ mine)) then
    perform settle_private._refuse_bound(call, jsonb_build_object('target_role', role));
  end if;
end
$$;

-- grant_tenant(role, tenant) -> the tenants the role may reach now
create function settle.grant_tenant(role text, tenant text)
returns text[]
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_oid oid;
  v_mine text[] := settle_private._visible_tenants();
  v_dropped jsonb;
  v_roles oid[];
  v_tenants text[];
begin
  v_oid := settle_private._check_login_role(grant_tenant.role);
  perform settle_private._check_name(grant_tenant.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  if v_mine is not null then
    if not (grant_tenant.tenant = any (v_mine)) then
      perform settle_private._refuse_tenant(grant_tenant.tenant, null, 'grant_tenant');
    end if;
    perform settle_private._check_role_within(grant_tenant.role, v_mine, 'grant_tenant');
  end if;
  -- Rows recorded under this name for a role that no longer exists belong to nobody who can
  -- log in: the role granted now starts from its own binding (the dropped rows are logged).
  -- (pg_roles read first, not joined: see _binding_rows_of.)
  v_roles := array(select r.oid from pg_catalog.pg_roles r);
  select jsonb_agg(jsonb_build_object('role_oid', b.role_oid, 'tenants', b.tenants)) into v_dropped
    from settle_private.tenant_bindings b
   where b.role_name = grant_tenant.role and b.role_oid <> v_oid and not (b.role_oid = any (v_roles));
  if v_dropped is not null then
    delete from settle_private.tenant_bindings b
     where b.role_name = grant_tenant.role and b.role_oid <> v_oid and not (b.role_oid = any (v_roles));
  end if;
  perform 1 from settle_private._binding_rows_of(grant_tenant.role);
  insert into settle_private.tenant_bindings as b (role_oid, role_name, tenants, bound_at, updated_at)
  values (v_oid, grant_tenant.role, array[grant_tenant.tenant], v_now, v_now)
  on conflict on constraint tenant_bindings_pkey do update
     -- A function, not a subquery: Citus refuses subqueries in an INSERT (a reference table there).
     set tenants = settle_private._sort_scopes(b.tenants || excluded.tenants),
         role_name = excluded.role_name, updated_at = excluded.updated_at
  returning b.tenants into v_tenants;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'grant_tenant', session_user::text,
          jsonb_build_object('role', grant_tenant.role, 'tenant', grant_tenant.tenant, 'tenants', v_tenants)
          || case when v_dropped is not null then jsonb_build_object('dropped_role_bindings', v_dropped) else '{}'::jsonb end);
  return v_tenants;
end
$$;

comment on function settle.grant_tenant(text, text) is
  'Admin: bind a login role to a tenant. A login role that holds tenant grants can claim, observe, heartbeat and read only those tenants; any other tenant answers SE013 and discloses nothing. A role without grants is a trusted multi-tenant service. The binding follows the role (its OID) through a rename.
Parameters: role (an existing login role: the role a service connects as, session_user), tenant (as settle.claim).
Outcomes: the tenants the role may reach now (sorted). Bindings left under this name by a dropped role are removed (logged as dropped_role_bindings).
SQLSTATEs: SE001 (tenant), SE008 (role does not exist or cannot log in), SE013 (the caller is bound and tenant is not one of its tenants), SE019 (the caller is bound and the role is unbound or reaches other tenants), 42501 (not settle_admin).
Locking: the role''s binding row. Logged in settle.admin_log. In force for every call that starts after the commit.
Idempotency: granting a held tenant changes nothing but the log.';

-- revoke_tenant(role, tenant) -> the tenants the role may reach now (NULL: unbound)
create function settle.revoke_tenant(role text, tenant text)
returns text[]
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_mine text[] := settle_private._visible_tenants();
  v_oids oid[];
  v_tenants text[];
begin
  if revoke_tenant.role is null then
    perform settle_private._raise('SE008', 'role must not be null', jsonb_build_object('field', 'role'), null);
  end if;
  if revoke_tenant.tenant is not null then
    perform settle_private._check_name(revoke_tenant.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  end if;
  if v_mine is not null then
    if revoke_tenant.tenant is null then
      perform settle_private._refuse_bound('revoke_tenant', jsonb_build_object('target_role', revoke_tenant.role));
    elsif not (revoke_tenant.tenant = any (v_mine)) then
      perform settle_private._refuse_tenant(revoke_tenant.tenant, null, 'revoke_tenant');
    end if;
    perform settle_private._check_role_within(revoke_tenant.role, v_mine, 'revoke_tenant');
  end if;
  select array_agg(r.role_oid) into v_oids from settle_private._binding_rows_of(revoke_tenant.role) r;
  if revoke_tenant.tenant is null then
    delete from settle_private.tenant_bindings b where b.role_oid = any (v_oids);
    v_tenants := null;
  else
    update settle_private.tenant_bindings b
       set tenants = array_remove(b.tenants, revoke_tenant.tenant), updated_at = v_now
     where b.role_oid = any (v_oids);
    -- What the role reaches now: the tenants every row of its lists (NULL: it has none).
    select case when count(*) > 0 then
             array(select distinct u.t from settle_private.tenant_bindings b1, unnest(b1.tenants) as u(t)
                    where b1.role_oid = any (v_oids)
                      and not exists (select 1 from settle_private.tenant_bindings b2
                                       where b2.role_oid = any (v_oids) and not (u.t = any (b2.tenants)))
                    order by 1) end
      into v_tenants
      from settle_private.tenant_bindings b where b.role_oid = any (v_oids);
  end if;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'revoke_tenant', session_user::text,
          jsonb_build_object('role', revoke_tenant.role, 'tenant', revoke_tenant.tenant, 'tenants', v_tenants));
  return v_tenants;
end
$$;

comment on function settle.revoke_tenant(text, text) is
  'Admin: take a tenant away from a login role, or unbind the role.
Parameters: role (a login role, or the name of a dropped one whose binding is left); tenant (NULL: remove the whole binding, which makes the role a trusted multi-tenant service again).
Outcomes: the tenants the role may reach now; an empty array when the last one was revoked: the role stays bound and is refused everywhere (fail closed, never widened by a revocation); NULL when the role is unbound (or never was bound).
SQLSTATEs: SE001 (tenant), SE008 (role NULL), SE013 (the caller is bound and tenant is not one of its tenants), SE019 (the caller is bound: unbinding, or a role that reaches other tenants), 42501 (not settle_admin).
Locking: the role''s binding rows. Logged in settle.admin_log. In force for every call that starts after the commit; a call already running finishes under the grants it read.
Idempotency: revoking what the role does not hold changes nothing but the log.';

-- ---------------------------------------------------------------------------------------
-- settle.revoke_binding
-- ---------------------------------------------------------------------------------------

-- revoke_binding(tenant, principal, below_generation) -> the floor in force
create function settle.revoke_binding(tenant text, principal text, below_generation bigint)
returns bigint
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_previous bigint;
  v_floor bigint;
begin
  perform settle_private._check_name(revoke_binding.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  perform settle_private._check_name(revoke_binding.principal, 'principal', settle_private._limit('principal_bytes'), 'SE003');
  if not settle_private._tenant_ok(revoke_binding.tenant) then
    perform settle_private._refuse_tenant(revoke_binding.tenant, null, 'revoke_binding');
  end if;
  if revoke_binding.below_generation is null or revoke_binding.below_generation < 1 then
    perform settle_private._raise('SE008', 'below_generation must be a positive binding generation',
      jsonb_build_object('field', 'below_generation'),
      'Pass the first generation that stays valid (the one the principal re-authenticated with).');
  end if;
  select f.below_generation into v_previous from settle_private.binding_floors f
   where f.tenant = revoke_binding.tenant and f.principal = revoke_binding.principal
   for update;
  insert into settle_private.binding_floors as f (tenant, principal, below_generation, revoked_at)
  values (revoke_binding.tenant, revoke_binding.principal, revoke_binding.below_generation, v_now)
  on conflict on constraint binding_floors_pkey do update
     set below_generation = greatest(f.below_generation, excluded.below_generation),
         revoked_at = case when excluded.below_generation > f.below_generation then excluded.revoked_at else f.revoked_at end
  returning f.below_generation into v_floor;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'revoke_binding', session_user::text,
          jsonb_build_object('tenant', revoke_binding.tenant, 'principal', revoke_binding.principal,
                             'below_generation', revoke_binding.below_generation, 'previous', v_previous, 'floor', v_floor));
  return v_floor;
end
$$;

comment on function settle.revoke_binding(text, text, bigint) is
  'Admin: revoke every binding generation of a principal in a tenant below a floor, after re-authentication; the reservation locks stay immutable.
Parameters: tenant, principal (as settle.claim), below_generation (>= 1: the first generation that stays valid).
Outcomes: the floor in force (floors only rise: a lower value keeps the higher floor). From the commit on, a claim presenting a revoked generation answers refused (binding_revoked), an observation or heartbeat fenced (binding_revoked, its payload kept in the audit log), a get refused; an operation reserved under a revoked generation that is not completed can no longer complete and moves to conflict (error binding_revoked) at its next touch (claim, observation, heartbeat or get of its key).
SQLSTATEs: SE001 (tenant), SE003 (principal), SE008 (below_generation), SE013 (the caller is bound to other tenants), 42501 (not settle_admin).
Locking: the floor row. Logged in settle.admin_log. Idempotency: idempotent; the caller''s safe path is in docs/protocol.md section 13.';

reset role;

