-- 00015: grants.
--
-- Why: the privileges of every role, in one place, after every object they are on. settle_app
-- gets EXECUTE on the application API and nothing on any table or view; settle_readonly reads
-- the views; settle_admin also runs maintenance; settle_consumer reads the feed of the
-- consumers it is given; settle_reconciler resolves what needs reconciliation. Functions are
-- not executable by PUBLIC (00001 revokes it by default; revoked again here for functions
-- created before that default applied). The other migrations grant nothing: they only take
-- PUBLIC's defaults away where an object is created (`revoke ... from public`).
-- (00016, the batch calls, still grants its own two functions: it comes after this file.)

-- The owner reads every session's transaction start and state (settle.feed_horizon's
-- xact_age_seconds and state): pg_stat_activity shows pid, login, application_name and
-- backend_xid of every session to anyone, the rest only to the session's own role or
-- pg_read_all_stats. Granted by the migrating user (before acting as the owner below) when it
-- may (a superuser); otherwise those two columns stay NULL for other roles' sessions (docs/feed.md).
do $$
begin
  if not pg_catalog.pg_has_role('settle_owner', 'pg_read_all_stats', 'MEMBER') then
    execute 'grant pg_read_all_stats to settle_owner';
  end if;
exception
  when unique_violation or duplicate_object then
    null; -- another database of this cluster granted it a moment ago
  when insufficient_privilege then
    raise notice 'settle_owner is not a member of pg_read_all_stats: settle.feed_horizon shows no transaction age for other roles'' sessions';
end
$$;

set local role settle_owner;

revoke all on all functions in schema settle from public;
revoke all on all functions in schema settle_private from public;

-- Every role that calls the API reaches the schema; none reaches settle_private.
grant usage on schema settle to settle_app, settle_readonly, settle_admin, settle_consumer, settle_reconciler;

-- ---------------------------------------------------------------------------------------
-- The application, readers and admins (00003-00012)
-- ---------------------------------------------------------------------------------------

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
-- settle.metrics reads its row from these functions (SECURITY DEFINER): its readers execute them.
grant execute on function settle_private._metrics() to settle_readonly, settle_admin;
-- Every view filters its rows by the reader's tenant binding through this function (SECURITY
-- DEFINER: it reads the bindings for them). Every role granted a view executes it, the
-- reconciler included (granted settle.operations, attempts, audit_log, dead_letters below):
-- without it a granted view answers 42501 on its first row (test/engine/view-grants.test.ts).
grant execute on function settle_private._visible_tenants() to settle_readonly, settle_admin, settle_reconciler;

-- ---------------------------------------------------------------------------------------
-- The settlement feed (00013)
-- ---------------------------------------------------------------------------------------

-- The consumer role reads the feed of the consumers it is given, nothing else (no table, no
-- view of operations). Tenant binding (settle.grant_tenant) applies to its login roles.
grant execute on function
  settle.read_feed(text, integer, interval),
  settle.ack_feed(text, integer, uuid, xid8, bigint),
  settle.await_feed(text, integer)
  to settle_consumer;
grant execute on function
  settle.register_consumer(text, text[], integer, text),
  settle.drop_consumer(text),
  settle.reset_consumer(text, timestamptz, boolean),
  settle.trim_feed(integer)
  to settle_admin;
grant select on settle.feed_consumers, settle.feed_horizon to settle_consumer, settle_readonly, settle_admin;
grant execute on function settle_private._feed_lag(), settle_private._feed_horizon_holders()
  to settle_consumer, settle_readonly, settle_admin;
grant execute on function settle_private._feed_metrics() to settle_readonly, settle_admin;
grant select on settle.feed_events to settle_readonly, settle_admin;
grant execute on function settle_private._feed_in_lane(integer, text, integer, integer, text[]) to settle_readonly, settle_admin;

-- ---------------------------------------------------------------------------------------
-- Reconciliation and upkeep (00014)
-- ---------------------------------------------------------------------------------------

-- settle_reconciler: the role of a reconciler process, a least-privilege alternative to
-- settle_admin: resolve, lease operations needing reconciliation, read them.
grant execute on function
  settle.resolve(text, text, text, integer, text, text, jsonb, jsonb, jsonb, settle.status),
  settle.lease_reconciliation(text, interval, integer),
  settle.release_reconciliation(text, text, uuid, interval),
  settle.inspect(text, text),
  settle.status_rank(settle.status)
  to settle_reconciler, settle_admin;
grant execute on function
  settle.run_upkeep(text, boolean),
  settle.dead_letter_in_doubt(interval, integer),
  settle.set_retention(interval),
  settle.set_in_doubt_after(interval),
  settle.set_upkeep_interval(text, interval)
  to settle_admin;
grant select on settle.upkeep to settle_readonly, settle_admin;
grant execute on function settle_private._upkeep_metrics() to settle_readonly, settle_admin;
grant select on settle.operations, settle.attempts, settle.audit_log, settle.dead_letters to settle_reconciler;

reset role;
