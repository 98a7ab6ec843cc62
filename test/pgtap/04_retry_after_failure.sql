-- 04_retry_after_failure.sql: a retryable failure does not block the retry's success.
--
-- Attempt 1 fails retryably: its own attempt record settles as failed and the lease is
-- released. The next claim opens attempt 2, whose success settles the operation. There is
-- exactly one settlement (for attempt 2), and settle.attempts shows both attempts.
-- The application calls run as settle_app; the views are read as settle_readonly.
begin;
create extension if not exists pgtap;
select plan(9);

set local role settle_app;

select * from settle.claim(
  tenant => 'pgtap', key => 'order-7', request => '{"amount": 500, "currency": "EUR"}',
  principal => 'svc-checkout', worker => 'worker-a'
) \gset first_
select is(:'first_outcome'::text, 'acquired', 'claim: attempt 1 acquired');

-- Attempt 1: the payment provider answered 503, worth retrying.
select * from settle.fail(
  tenant => 'pgtap', key => 'order-7', attempt => 1, lease_token => :'first_lease_token',
  fingerprint => :'first_fingerprint', principal => 'svc-checkout', scopes => '{}',
  binding_generation => 0, error => '{"code": "provider_unavailable", "http_status": 503}',
  retryable => true
) \gset failed_
select is(:'failed_outcome'::text, 'recorded', 'retryable fail of attempt 1: recorded');
select is(:'failed_status'::settle.status, 'pending', 'retryable fail of attempt 1: status pending, lease released');

-- The retry claims again with the same request and binding: attempt 2.
select * from settle.claim(
  tenant => 'pgtap', key => 'order-7', request => '{"amount": 500, "currency": "EUR"}',
  principal => 'svc-checkout', worker => 'worker-b'
) \gset second_
select is(:'second_outcome'::text, 'acquired', 'claim after the failure: acquired');
select is(:'second_attempt'::integer, 2, 'claim after the failure: attempt 2');

select * from settle.complete(
  tenant => 'pgtap', key => 'order-7', attempt => 2, lease_token => :'second_lease_token',
  fingerprint => :'second_fingerprint', principal => 'svc-checkout', scopes => '{}',
  binding_generation => 0, result => '{"payment_id": "pay_7"}'
) \gset done_
select is(:'done_outcome'::text, 'settled', 'complete of attempt 2: settled');

set local role settle_readonly;

select results_eq(
  $$select attempt, result from settle.settlements where tenant = 'pgtap' and key = 'order-7'$$,
  $$values (2, '{"payment_id": "pay_7"}'::jsonb)$$,
  'settle.settlements: exactly one row, for attempt 2');

select results_eq(
  $$select attempt, observation::text, settled, error ->> 'code'
      from settle.attempts where tenant = 'pgtap' and key = 'order-7' order by attempt$$,
  $$values (1, 'failed', false, 'provider_unavailable'), (2, 'completed', true, null)$$,
  'settle.attempts: attempt 1 failed (not the settlement), attempt 2 completed and settled');

select results_eq(
  $$select status, settled_attempt, error from settle.operations where tenant = 'pgtap' and key = 'order-7'$$,
  $$values ('completed'::settle.status, 2, null::jsonb)$$,
  'settle.operations: completed by attempt 2, no stored error');

select * from finish();
rollback;
