-- The psql walk-through of docs/sql-api.md. Every output shown in that document was captured
-- by running this file, on PostgreSQL 15, in a fresh database with sql/migrations applied:
--   createdb walkthrough
--   for f in sql/migrations/*.sql; do (echo 'begin;'; cat "$f"; echo 'commit;') | psql -X -q -v ON_ERROR_STOP=1 walkthrough; done
--   psql -X -a -f docs/examples/sql-api-walkthrough.sql walkthrough > /tmp/walkthrough.out 2>&1
--   node docs/examples/refresh-sql-api.mjs /tmp/walkthrough.out
-- Lines `\echo '@@ <name>'` mark where each example of the document starts.
-- Run as a superuser: the script switches to settle_app / settle_admin with SET ROLE.
\pset null '(null)'
\set VERBOSITY default
\set SHOW_CONTEXT never
\set ON_ERROR_STOP off
\echo '@@ fingerprint'
select settle.fingerprint('{"amount": 1250, "currency": "EUR", "to": "acct_9"}');
select settle.fingerprint('{"b": 1, "a": 10.50}') = settle.fingerprint('{"a": 10.5, "b": 1}') as same;
\echo '@@ fingerprint_by_hand'
select '{"amount": 1250, "currency": "EUR", "to": "acct_9"}'::jsonb::text as canonical, 'v1:' || encode(sha256(convert_to('{"to": "acct_9", "amount": 1250, "currency": "EUR"}', 'UTF8')), 'hex') as by_hand;
\echo '@@ status_rank'
select s as status, settle.status_rank(s) from unnest(enum_range(null::settle.status)) as s;
\echo '@@ roles'
set role settle_app;
\echo '@@ claim_acquired'
select * from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, worker => 'worker-a') \gset
\echo outcome=:outcome attempt=:attempt lease_token=:lease_token
\echo lease_expires_at=:lease_expires_at fingerprint=:fingerprint
\echo '@@ claim_in_progress'
select * from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, worker => 'worker-b') \gx
\echo '@@ heartbeat_extended'
select * from settle.heartbeat(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => :'lease_token', lease => '60 seconds');
\echo '@@ heartbeat_invalid_token'
select * from settle.heartbeat(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => gen_random_uuid());
\echo '@@ complete_settled'
select * from settle.complete(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, result => '{"payment_id": "pay_123", "state": "captured"}') \gx
\echo '@@ complete_duplicate'
select outcome, reason, status, settled_attempt from settle.complete(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, result => '{"payment_id": "pay_123", "state": "captured"}');
\echo '@@ claim_replay'
select * from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gx
\echo '@@ heartbeat_settled'
select * from settle.heartbeat(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => :'lease_token');
\echo '@@ report_unknown_after_success'
select outcome, reason, status, result from settle.report_unknown(tenant => 'acme', key => 'order-42', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7);
\echo '@@ claim_conflict'
select * from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 9900, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 8) \gx
\echo '@@ get'
select * from settle.get(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gx
\echo '@@ get_conflict'
select * from settle.get(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'mallory', scopes => '{payments:write}', binding_generation => 7) \gx
\echo '@@ get_missing'
select outcome, status, result from settle.get(tenant => 'acme', key => 'no-such-key', request => '{}', principal => 'svc-checkout');
\echo '@@ inspect'
set role settle_readonly;
select * from settle.inspect(tenant => 'acme', key => 'order-42') \gx
set role settle_app;
\echo '@@ fail_retryable'
select * from settle.claim(tenant => 'acme', key => 'order-43', request => '{"amount": 500, "currency": "EUR", "to": "acct_7"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, max_attempts => 3) \gset
select * from settle.fail(tenant => 'acme', key => 'order-43', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, error => '{"code": "psp_timeout_before_send"}', retryable => true) \gx
\echo '@@ fail_next_attempt'
select * from settle.claim(tenant => 'acme', key => 'order-43', request => '{"amount": 500, "currency": "EUR", "to": "acct_7"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gset
\echo outcome=:outcome status=:status attempt=:attempt
\echo '@@ fail_final'
select outcome, reason, status, attempt, error from settle.fail(tenant => 'acme', key => 'order-43', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, error => '{"code": "card_declined"}', retryable => false);
\echo '@@ claim_failed'
select outcome, status, attempt, error, dead_lettered from settle.claim(tenant => 'acme', key => 'order-43', request => '{"amount": 500, "currency": "EUR", "to": "acct_7"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7);
\echo '@@ unknown_recorded'
select * from settle.claim(tenant => 'acme', key => 'order-44', request => '{"amount": 75, "currency": "EUR", "to": "acct_3"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gset a1_
select * from settle.report_unknown(tenant => 'acme', key => 'order-44', attempt => :a1_attempt, lease_token => :'a1_lease_token', fingerprint => :'a1_fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gx
\echo '@@ unknown_retry'
select * from settle.claim(tenant => 'acme', key => 'order-44', request => '{"amount": 75, "currency": "EUR", "to": "acct_3"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gset a2_
\echo outcome=:a2_outcome status=:a2_status attempt=:a2_attempt
\echo '@@ unknown_late_success'
select outcome, reason, status, attempt, settled_attempt, result from settle.complete(tenant => 'acme', key => 'order-44', attempt => :a1_attempt, lease_token => :'a1_lease_token', fingerprint => :'a1_fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, result => '{"payment_id": "pay_456"}');
\echo '@@ unknown_superseded_heartbeat'
select * from settle.heartbeat(tenant => 'acme', key => 'order-44', attempt => :a2_attempt, lease_token => :'a2_lease_token');
\echo '@@ complete_conflict'
select * from settle.claim(tenant => 'acme', key => 'order-47', request => '{"amount": 10, "currency": "EUR", "to": "acct_5"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7) \gset
select * from settle.complete(tenant => 'acme', key => 'order-47', attempt => :attempt, lease_token => :'lease_token', fingerprint => :'fingerprint', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 6, result => '{"payment_id": "pay_789"}') \gx
\echo '@@ expire_setup'
select outcome, attempt, lease_expires_at from settle.claim(tenant => 'acme', key => 'order-45', request => '{"amount": 20, "currency": "EUR", "to": "acct_1"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, lease => '1 second', max_attempts => 1);
select outcome, attempt, lease_expires_at from settle.claim(tenant => 'acme', key => 'order-46', request => '{"amount": 30, "currency": "EUR", "to": "acct_2"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7, lease => '1 second', max_attempts => 3);
select pg_sleep(1.5);
\echo '@@ expire_leases'
set role settle_admin;
select * from settle.expire_leases();
\echo '@@ dead_letters'
select tenant, key, attempt, max_attempts, error, redrive_count from settle.dead_letters;
\echo '@@ claim_dead_lettered'
set role settle_app;
select outcome, status, attempt, error, dead_lettered from settle.claim(tenant => 'acme', key => 'order-45', request => '{"amount": 20, "currency": "EUR", "to": "acct_1"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7);
\echo '@@ redrive'
set role settle_admin;
select tenant, key, status, attempt, max_attempts, error, dead_lettered_at, redrive_count from settle.redrive(tenant => 'acme', key => 'order-45', additional_attempts => 2, reason => 'PSP outage over (INC-311)');
\echo '@@ redrive_again'
select * from settle.redrive(tenant => 'acme', key => 'order-45');
\echo :LAST_ERROR_SQLSTATE
\echo '@@ redrive_claim'
set role settle_app;
select outcome, status, attempt from settle.claim(tenant => 'acme', key => 'order-45', request => '{"amount": 20, "currency": "EUR", "to": "acct_1"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7);
\echo '@@ redrive_mismatch'
set role settle_admin;
select * from settle.redrive(tenant => 'acme', key => 'order-43', request => '{"amount": 501, "currency": "EUR", "to": "acct_7"}');
\echo :LAST_ERROR_SQLSTATE
\echo '@@ attempts_view'
select key, attempt, worker, end_reason, observation, retryable, error, late_result, settled from settle.attempts where key in ('order-43', 'order-44') order by key, attempt;
\echo '@@ audit_view'
select audit_id, event, outcome, attempt, status_before, status_after, actor, detail from settle.audit_log where key = 'order-42' order by audit_id;
\echo '@@ settlements_view'
select * from settle.settlements order by key;
\echo '@@ stats_view'
select * from settle.stats \gx
\echo '@@ guard_downgrade'
reset role;
update settle_private.operations set status = 'unknown' where tenant = 'acme' and key = 'order-43';
\echo :LAST_ERROR_SQLSTATE
\echo '@@ guard_lock'
update settle_private.operations set binding_generation = 8 where tenant = 'acme' and key = 'order-45';
\echo :LAST_ERROR_SQLSTATE
\echo '@@ guard_delete'
delete from settle_private.operations where tenant = 'acme' and key = 'order-43';
\echo :LAST_ERROR_SQLSTATE
\echo '@@ guard_audit'
update settle_private.audit_log set outcome = 'acquired' where key = 'order-43';
\echo :LAST_ERROR_SQLSTATE
\echo '@@ purge'
set role settle_admin;
-- The walk-through purges at once; the minimum retention stays 24 hours unless lowered like this.
select settle.set_purge_min_retention(interval '0 seconds');
select settle.purge(older_than => '0 seconds');
select count(*) from settle.inspect(tenant => 'acme', key => 'order-42');
select key, event, outcome, status_before, status_after, detail from settle.audit_log where key = 'order-42';
\echo '@@ purge_reclaim'
set role settle_app;
select outcome, attempt from settle.claim(tenant => 'acme', key => 'order-42', request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}', principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7);
\echo '@@ grant_tenant'
reset role;
create role walkthrough_acme_checkout login;
grant settle_app to walkthrough_acme_checkout;
set role settle_admin;
select settle.grant_tenant(role => 'walkthrough_acme_checkout', tenant => 'acme');
reset role;
set session authorization walkthrough_acme_checkout;
select outcome from settle.claim(tenant => 'globex', key => 'order-1', request => '{}', principal => 'svc-checkout');
\echo :LAST_ERROR_SQLSTATE
reset session authorization;
\echo '@@ revoke_tenant'
set role settle_admin;
select settle.revoke_tenant(role => 'walkthrough_acme_checkout', tenant => 'acme');
select settle.revoke_tenant(role => 'walkthrough_acme_checkout', tenant => null);
select event, actor, detail from settle.admin_log order by log_id;
reset role;
drop role walkthrough_acme_checkout;
\echo '@@ revoke_binding'
set role settle_app;
select outcome, attempt from settle.claim(tenant => 'acme', key => 'order-49', request => '{"amount": 700, "currency": "EUR", "to": "acct_3"}', principal => 'svc-refunds', binding_generation => 4) \gset
set role settle_admin;
select settle.revoke_binding(tenant => 'acme', principal => 'svc-refunds', below_generation => 5);
set role settle_app;
select outcome, reason from settle.claim(tenant => 'acme', key => 'order-49', request => '{"amount": 700, "currency": "EUR", "to": "acct_3"}', principal => 'svc-refunds', binding_generation => 4);
select outcome, reason, status, error from settle.get(tenant => 'acme', key => 'order-49', request => '{"amount": 700, "currency": "EUR", "to": "acct_3"}', principal => 'svc-refunds', binding_generation => 5) \gx
\echo '@@ claim_many'
select ordinal, key, outcome, attempt, lease_token is not null as leased
  from settle.claim_many(tenant => 'acme', keys => '{pay-2,pay-1,pay-2}',
                         requests => array['{"amount":"2.00"}', '{"amount":"1.00"}', '{"amount":"2.00"}']::jsonb[],
                         principal => 'svc-payments');
\echo '@@ error_invalid_tenant'
select * from settle.claim(tenant => ' ', key => 'order-42', request => '{}', principal => 'svc-checkout');
\echo :LAST_ERROR_SQLSTATE
\echo '@@ error_invalid_lease'
select * from settle.claim(tenant => 'acme', key => 'order-48', request => '{}', principal => 'svc-checkout', lease => '2 days');
\echo :LAST_ERROR_SQLSTATE
\echo '@@ error_not_found'
select * from settle.heartbeat(tenant => 'acme', key => 'never-claimed', attempt => 1, lease_token => gen_random_uuid());
\echo :LAST_ERROR_SQLSTATE
\echo '@@ error_no_table_access'
select count(*) from settle_private.operations;
\echo :LAST_ERROR_SQLSTATE
\echo '@@ error_no_admin_api'
select settle.purge(older_than => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
\echo '@@ end'
