-- 03_guards.sql: the invariants hold for every writer, even a superuser writing the private
-- tables directly.
--
-- Guard triggers on settle_private (ENABLE ALWAYS) refuse what a CHECK cannot: moving the status
-- down the lattice (SE021), changing the reservation lock (SE020) or a stored result (SE022),
-- changing the audit log (SE023), and DELETE anywhere outside settle.purge (SE025). The row
-- rules (checked by the same guard triggers) refuse a row that breaks a rule on its own, reported like a
-- CHECK constraint (23514, the rule's name). This script
-- runs as the connecting superuser on purpose; each refused statement runs in its own
-- savepoint (throws_ok), and the whole script is rolled back.
begin;
create extension if not exists pgtap;
select plan(9);

-- Set-up through the API: pgtap/guard-1 settled with a result.
select * from settle.claim(
  tenant => 'pgtap', key => 'guard-1', request => '{"amount": 10}', principal => 'svc-checkout'
) \gset claim_
select * from settle.complete(
  tenant => 'pgtap', key => 'guard-1', attempt => 1, lease_token => :'claim_lease_token',
  fingerprint => :'claim_fingerprint', principal => 'svc-checkout', scopes => '{}',
  binding_generation => 0, result => '{"payment_id": "pay_1"}'
) \gset done_
select is(:'done_outcome'::text, 'settled', 'set-up: pgtap/guard-1 is settled through the API');
-- A conflicting claim writes a row of settle_private.audit_log (the claim and the settlement
-- above are logged on the attempt row).
select outcome as conflict_outcome from settle.claim(
  tenant => 'pgtap', key => 'guard-1', request => '{"amount": 11}', principal => 'svc-checkout'
) \gset

select throws_ok(
  $$update settle_private.operations set status = 'unknown' where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE021', null,
  'SE021: the status may not move down the lattice (completed -> unknown), even for a superuser');

select throws_ok(
  $$update settle_private.operations set result = '{"payment_id": "pay_2"}' where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE022', null,
  'SE022: the result of a completed operation is immutable');

select throws_ok(
  $$update settle_private.operations set binding_generation = 8 where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE020', null,
  'SE020: the reservation lock (request, fingerprint, principal, scopes, binding generation) is immutable');

select throws_ok(
  $$update settle_private.audit_log set outcome = 'acquired' where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE023', null,
  'SE023: the audit log is append-only (UPDATE refused)');

select throws_ok(
  $$delete from settle_private.operations where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE025', null,
  'SE025: DELETE is refused outside settle.purge');

select throws_ok(
  $$update settle_private.operations set settled_attempt = 2 where tenant = 'pgtap' and key = 'guard-1'$$,
  'SE022', null,
  'SE022: the settled attempt of a completed operation is immutable');

select throws_ok(
  $$insert into settle_private.operations (tenant, key, fingerprint, request, principal, scopes,
      binding_generation, status, attempt, attempt_token, claimed_at, max_attempts, created_at, updated_at)
    values ('pgtap', 'rule-1', 'v1:' || repeat('a', 64), '{}', 'dba', '{}', 0, 'running', 1, gen_random_uuid(), now(), 5,
            now(), now())$$,
  '23514', 'new row for relation "operations" violates check constraint "running_is_leased"',
  '23514 running_is_leased: a running operation must hold a lease, also when a superuser inserts it');

select results_eq(
  $$select status, result from settle.inspect(tenant => 'pgtap', key => 'guard-1')$$,
  $$values ('completed'::settle.status, '{"payment_id": "pay_1"}'::jsonb)$$,
  'after the refused writes the operation is unchanged');

select * from finish();
rollback;
