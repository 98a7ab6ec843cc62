-- 02_claim_and_settle.sql: the happy path of one operation, as the application role sees it.
--
-- A service (role settle_app) claims operation pgtap/order-1, a second caller is told it is in
-- progress, the first settles it, a retry replays the stored result, a different request under
-- the same key is a conflict that discloses nothing, and a late report_unknown from the attempt
-- that already settled cannot move the status back.
--
-- psql's \gset keeps the lease token and fingerprint of the acquired claim in variables
-- (claim_lease_token, claim_fingerprint) for the calls that must present them.
begin;
create extension if not exists pgtap;
select plan(11);

set local role settle_app;

-- 1. The first claim reserves the key and opens attempt 1 with a lease.
select * from settle.claim(
  tenant => 'pgtap', key => 'order-1',
  request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}',
  principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7,
  worker => 'worker-a'
) \gset claim_
select is(:'claim_outcome'::text, 'acquired', 'first claim: outcome acquired');
select is(:'claim_status'::settle.status, 'running', 'first claim: status running');
select is(:'claim_attempt'::integer, 1, 'first claim: attempt 1');
select is(:'claim_fingerprint'::text, settle.fingerprint('{"to": "acct_9", "amount": 1250, "currency": "EUR"}'),
  'the fingerprint is computed in the database from the request (key order does not matter)');

-- 2. Another caller with the same request and binding, while the lease is live: do not execute.
select results_eq(
  $$select outcome, status, attempt, retry_after_ms > 0
      from settle.claim(
        tenant => 'pgtap', key => 'order-1',
        request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}',
        principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7,
        worker => 'worker-b')$$,
  $$values ('in_progress', 'running'::settle.status, 1, true)$$,
  'second claim while the lease is live: in_progress on attempt 1, with retry_after_ms');

-- 3. The lease holder reports success: the one settlement, with its result.
select * from settle.complete(
  tenant => 'pgtap', key => 'order-1', attempt => 1, lease_token => :'claim_lease_token',
  fingerprint => :'claim_fingerprint',
  principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7,
  result => '{"payment_id": "pay_123"}'
) \gset done_
select is(:'done_outcome'::text, 'settled', 'complete: outcome settled');
select is(:'done_status'::settle.status, 'completed', 'complete: status completed');

-- 4. A retry of the same claim replays the stored result; nothing executes again.
select results_eq(
  $$select outcome, status, attempt, settled_attempt, result
      from settle.claim(
        tenant => 'pgtap', key => 'order-1',
        request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}',
        principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7)$$,
  $$values ('replay', 'completed'::settle.status, 1, 1, '{"payment_id": "pay_123"}'::jsonb)$$,
  'claim after completion: replay of attempt 1 with the stored result');

-- 5. A different request under the same key: conflict, naming what differs, disclosing nothing.
select results_eq(
  $$select outcome, conflict_on,
           num_nonnulls(status, attempt, lease_token, lease_expires_at, retry_after_ms, fingerprint,
                        result, settled_attempt, error, dead_lettered)
      from settle.claim(
        tenant => 'pgtap', key => 'order-1',
        request => '{"amount": 9999, "currency": "EUR", "to": "acct_666"}',
        principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7)$$,
  $$values ('conflict', array['request'], 0)$$,
  'a different request under the same key: conflict on request, every other column NULL');

-- 6. The settled attempt's caller timed out and reports unknown: the settlement stands.
select * from settle.report_unknown(
  tenant => 'pgtap', key => 'order-1', attempt => 1, lease_token => :'claim_lease_token',
  fingerprint => :'claim_fingerprint',
  principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7
) \gset late_
select is(:'late_outcome'::text, 'already_settled', 'report_unknown after completion: already_settled');
select results_eq(
  $$select outcome, status, result, settled_attempt from settle.get(tenant => 'pgtap', key => 'order-1',
      request => '{"amount": 1250, "currency": "EUR", "to": "acct_9"}',
      principal => 'svc-checkout', scopes => '{payments:write}', binding_generation => 7)$$,
  $$values ('found'::text, 'completed'::settle.status, '{"payment_id": "pay_123"}'::jsonb, 1)$$,
  'settle.get (lock-gated): status stays completed with the result of attempt 1');

select * from finish();
rollback;
