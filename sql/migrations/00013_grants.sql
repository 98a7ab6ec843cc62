-- 00013: grants.
--
-- Why: the privileges of every role, in one place. settle_app gets EXECUTE on the application
-- API and nothing on any table or view; settle_readonly reads the views; settle_admin also runs
-- maintenance. Functions are not executable by PUBLIC (00001 revokes it by default; revoked
-- again here for functions created before that default applied).

set local role settle_owner;

revoke all on all functions in schema settle from public;
revoke all on all functions in schema settle_private from public;

grant execute on function
  settle.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean),
  settle.heartbeat(text, text, integer, uuid, interval),
  settle.complete(text, text, integer, uuid, text, text, text[], bigint, jsonb),
  settle.fail(text, text, integer, uuid, text, text, text[], bigint, jsonb, boolean),
  settle.report_unknown(text, text, integer, uuid, text, text, text[], bigint),
  settle.get(text, text, jsonb, text, text[], bigint),
  settle.fingerprint(jsonb),
  settle.status_rank(settle.status)
  to settle_app;

grant execute on function settle.inspect(text, text), settle.fingerprint(jsonb), settle.status_rank(settle.status)
  to settle_readonly, settle_admin;
grant execute on function
  settle.expire_leases(integer),
  settle.redrive(text, text, integer, jsonb, text),
  settle.purge(interval, integer),
  settle.set_purge_min_retention(interval),
  settle.grant_tenant(text, text),
  settle.revoke_tenant(text, text),
  settle.revoke_binding(text, text, bigint)
  to settle_admin;

grant select on settle.operations, settle.attempts, settle.audit_log, settle.dead_letters,
  settle.settlements, settle.stats, settle.metrics, settle.admin_log, settle.audit_overflow to settle_readonly, settle_admin;
-- settle.metrics reads its row from this function (SECURITY DEFINER): its readers execute it.
grant execute on function settle_private._metrics() to settle_readonly, settle_admin;
-- Every view filters its rows by the reader's tenant binding through this function (SECURITY
-- DEFINER: it reads the bindings for them). Every role granted a view executes it, the
-- reconciler included (00015 grants it settle.operations, attempts, audit_log, dead_letters):
-- without it a granted view answers 42501 on its first row (test/engine/view-grants.test.ts).
grant execute on function settle_private._visible_tenants() to settle_readonly, settle_admin, settle_reconciler;

reset role;
