-- 01_api_surface.sql: what the pg-settle SQL API is, and who may call it.
--
-- The public interface is schema `settle`: its functions and six read-only views (tables in
-- settle_private are not an interface). PUBLIC may execute none of the functions; settle_app
-- may execute the application functions and none of the maintenance ones. The status enum is
-- declared in lattice order, and that order is part of the contract.
--
-- Run: pg_prove --dbname <your database> test/pgtap/*.sql (needs the pgtap extension available;
-- everything happens in one transaction that is rolled back).
begin;
create extension if not exists pgtap;
select plan(54);

-- The functions, with their argument types (call them with named arguments).
select functions_are('settle', array[
  'claim', 'heartbeat', 'complete', 'fail', 'report_unknown', 'get', 'inspect', 'fingerprint', 'status_rank',
  'claim_many', 'complete_many', 'expire_leases', 'redrive', 'purge', 'set_purge_min_retention', 'grant_tenant', 'revoke_tenant', 'revoke_binding',
  'register_consumer', 'drop_consumer', 'read_feed', 'ack_feed', 'await_feed', 'reset_consumer', 'trim_feed',
  'resolve', 'lease_reconciliation', 'release_reconciliation', 'run_upkeep', 'set_retention', 'set_upkeep_interval',
  'dead_letter_in_doubt', 'set_in_doubt_after'
], 'schema settle has exactly the thirty-three API functions');

select has_function('settle', 'claim',
  array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'settle.claim(tenant, key, request, principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown)');
select has_function('settle', 'heartbeat',
  array['text', 'text', 'integer', 'uuid', 'interval'],
  'settle.heartbeat(tenant, key, attempt, lease_token, lease)');
select has_function('settle', 'complete',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb'],
  'settle.complete(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation, result)');
select has_function('settle', 'fail',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb', 'boolean'],
  'settle.fail(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation, error, retryable)');
select has_function('settle', 'report_unknown',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint'],
  'settle.report_unknown(tenant, key, attempt, lease_token, fingerprint, principal, scopes, binding_generation)');
select has_function('settle', 'claim_many',
  array['text', 'text[]', 'jsonb[]', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'settle.claim_many(tenant, keys, requests, principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown)');
select has_function('settle', 'complete_many',
  array['text', 'text[]', 'integer[]', 'uuid[]', 'text[]', 'text', 'text[]', 'bigint', 'jsonb[]'],
  'settle.complete_many(tenant, keys, attempts, lease_tokens, fingerprints, principal, scopes, binding_generation, results)');
select has_function('settle', 'get', array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint'],
  'settle.get(tenant, key, request, principal, scopes, binding_generation)');
select has_function('settle', 'fingerprint', array['jsonb'], 'settle.fingerprint(request)');
select has_function('settle', 'status_rank', array['settle.status'], 'settle.status_rank(status)');
select has_function('settle', 'expire_leases', array['integer'], 'settle.expire_leases(batch_size)');
select has_function('settle', 'redrive',
  array['text', 'text', 'integer', 'jsonb', 'text'],
  'settle.redrive(tenant, key, additional_attempts, request, reason)');
select has_function('settle', 'purge', array['interval', 'integer'], 'settle.purge(older_than, batch_size)');

-- PUBLIC may execute none of them.
select function_privs_are('settle', 'claim',
  array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.claim');
select function_privs_are('settle', 'heartbeat', array['text', 'text', 'integer', 'uuid', 'interval'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.heartbeat');
select function_privs_are('settle', 'complete',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.complete');
select function_privs_are('settle', 'fail',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb', 'boolean'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.fail');
select function_privs_are('settle', 'report_unknown',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.report_unknown');
select function_privs_are('settle', 'get', array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.get');
select function_privs_are('settle', 'fingerprint', array['jsonb'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.fingerprint');
select function_privs_are('settle', 'status_rank', array['settle.status'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.status_rank');
select function_privs_are('settle', 'expire_leases', array['integer'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.expire_leases');
select function_privs_are('settle', 'redrive', array['text', 'text', 'integer', 'jsonb', 'text'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.redrive');
select function_privs_are('settle', 'purge', array['interval', 'integer'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.purge');

select function_privs_are('settle', 'claim_many',
  array['text', 'text[]', 'jsonb[]', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.claim_many');
select function_privs_are('settle', 'complete_many',
  array['text', 'text[]', 'integer[]', 'uuid[]', 'text[]', 'text', 'text[]', 'bigint', 'jsonb[]'],
  'public', array[]::text[], 'PUBLIC cannot execute settle.complete_many');
-- settle_app executes the application functions ...
select function_privs_are('settle', 'claim_many',
  array['text', 'text[]', 'jsonb[]', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.claim_many');
select function_privs_are('settle', 'complete_many',
  array['text', 'text[]', 'integer[]', 'uuid[]', 'text[]', 'text', 'text[]', 'bigint', 'jsonb[]'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.complete_many');
select function_privs_are('settle', 'claim',
  array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint', 'interval', 'text', 'integer', 'boolean'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.claim');
select function_privs_are('settle', 'heartbeat', array['text', 'text', 'integer', 'uuid', 'interval'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.heartbeat');
select function_privs_are('settle', 'complete',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.complete');
select function_privs_are('settle', 'fail',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint', 'jsonb', 'boolean'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.fail');
select function_privs_are('settle', 'report_unknown',
  array['text', 'text', 'integer', 'uuid', 'text', 'text', 'text[]', 'bigint'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.report_unknown');
select function_privs_are('settle', 'get', array['text', 'text', 'jsonb', 'text', 'text[]', 'bigint'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.get');
select function_privs_are('settle', 'inspect', array['text', 'text'],
  'settle_app', array[]::text[], 'settle_app cannot execute settle.inspect (the unrestricted read)');
select function_privs_are('settle', 'fingerprint', array['jsonb'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.fingerprint');
select function_privs_are('settle', 'status_rank', array['settle.status'],
  'settle_app', array['EXECUTE'], 'settle_app can execute settle.status_rank');

-- ... but not the maintenance functions (those belong to settle_admin).
select function_privs_are('settle', 'expire_leases', array['integer'],
  'settle_app', array[]::text[], 'settle_app cannot execute settle.expire_leases');
select function_privs_are('settle', 'redrive', array['text', 'text', 'integer', 'jsonb', 'text'],
  'settle_app', array[]::text[], 'settle_app cannot execute settle.redrive');
select function_privs_are('settle', 'purge', array['interval', 'integer'],
  'settle_app', array[]::text[], 'settle_app cannot execute settle.purge');
select function_privs_are('settle', 'resolve', array['text', 'text', 'text', 'integer', 'text', 'text', 'jsonb', 'jsonb', 'jsonb', 'settle.status'],
  'settle_app', array[]::text[], 'settle_app cannot execute settle.resolve');
select function_privs_are('settle', 'resolve', array['text', 'text', 'text', 'integer', 'text', 'text', 'jsonb', 'jsonb', 'jsonb', 'settle.status'],
  'settle_reconciler', array['EXECUTE'], 'settle_reconciler can execute settle.resolve');

-- The read-only views (granted to settle_readonly and settle_admin, not to settle_app).
select views_are('settle', array['operations', 'attempts', 'audit_log', 'dead_letters', 'settlements', 'stats', 'admin_log', 'metrics',
  'feed_consumers', 'upkeep', 'audit_overflow', 'feed_horizon', 'feed_events'],
  'schema settle has exactly the thirteen views');
select has_view('settle', 'operations', 'view settle.operations: the canonical record of each operation');
select has_view('settle', 'attempts', 'view settle.attempts: every attempt epoch and its settlement');
select has_view('settle', 'audit_log', 'view settle.audit_log: the append-only audit trail');
select has_view('settle', 'dead_letters', 'view settle.dead_letters: spent budgets awaiting redrive or purge');
select has_view('settle', 'settlements', 'view settle.settlements: exactly one row per completed operation');
select has_view('settle', 'stats', 'view settle.stats: per-tenant counts');
select is(
  (select count(*)::integer
     from pg_class c
    where c.relnamespace = 'settle'::regnamespace and c.relkind = 'v'
      and has_table_privilege('settle_app', c.oid, 'SELECT')),
  0,
  'settle_app can read none of the views');
select is(
  (select count(*)::integer
     from pg_class c
    where c.relnamespace = 'settle_private'::regnamespace and c.relkind = 'r'
      and (has_table_privilege('settle_app', c.oid, 'SELECT')
        or has_table_privilege('settle_app', c.oid, 'INSERT, UPDATE, DELETE'))),
  0,
  'settle_app has no privilege on the private tables');

-- The status lattice, in declaration order: pending/running < unknown < conflict < failed < completed.
select enum_has_labels('settle', 'status',
  array['pending', 'running', 'unknown', 'conflict', 'failed', 'completed'],
  'settle.status is declared in lattice order');
select results_eq(
  $$select settle.status_rank(s)::integer from unnest(enum_range(null::settle.status)) as s$$,
  $$values (1), (1), (2), (3), (4), (5)$$,
  'settle.status_rank ranks the lattice: pending = running < unknown < conflict < failed < completed');

select * from finish();
rollback;
