-- 00011: maintenance: settle.redrive and settle.purge (the sweeper, settle.expire_leases, is
-- with the leases in 00008).
--
-- Why: operators re-open dead letters and enforce retention; both are audited, both lock the
-- operation rows they touch, and neither can break the lattice (the guard triggers of 00004
-- allow exactly one move down: redrive of a dead-lettered failure).

set local role settle_owner;

-- redrive(tenant, key, additional_attempts, request, reason) -> the re-opened record
create function settle.redrive(
  tenant text,
  key text,
  additional_attempts integer default 1,
  request jsonb default null,
  reason text default null)
returns setof settle.operations
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
begin
  perform settle_private._check_operation_key(redrive.tenant, redrive.key);
  perform settle_private._check_count(additional_attempts, 'additional_attempts', settle_private._limit('max_attempts'));
  if reason is not null and octet_length(reason) > settle_private._limit('reason_bytes') then
    perform settle_private._raise('SE008', format('reason must be at most %s bytes', settle_private._limit('reason_bytes')),
      jsonb_build_object('field', 'reason'), null);
  end if;

  v_op := settle_private._lock_operation(redrive.tenant, redrive.key);
  if redrive.request is not null and settle_private._fingerprint(redrive.request) <> v_op.fingerprint then
    perform settle_private._raise('SE012', 'redrive refused: the request differs from the reservation',
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key),
      'A redrive re-runs the reserved request; a changed intent needs a new key.');
  end if;
  if v_op.status <> 'failed' or v_op.dead_lettered_at is null then
    perform settle_private._raise('SE011', format('only dead-lettered operations can be redriven (status %s)', v_op.status),
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key, 'status', v_op.status,
                         'dead_lettered', v_op.dead_lettered_at is not null),
      'See settle.dead_letters.');
  end if;

  update settle_private.operations o
     set status = 'pending', dead_lettered_at = null, error = null, redrive_count = v_op.redrive_count + 1,
         max_attempts = v_op.attempt + redrive.additional_attempts, updated_at = v_now
   where o.tenant = redrive.tenant and o.key = redrive.key;
  v_writes := v_writes + settle_private._audit(redrive.tenant, redrive.key, v_now, 'redrive', 'redriven', v_op.attempt,
    v_op.status, 'pending', session_user::text,
    jsonb_build_object('additional_attempts', additional_attempts, 'reason', reason,
                       'previous_error', v_op.error, 'redrive_count', v_op.redrive_count + 1));
  return query select * from settle.operations v where v.tenant = redrive.tenant and v.key = redrive.key;
end
$$;

comment on function settle.redrive(text, text, integer, jsonb, text) is
  'Re-open a dead-lettered operation for new attempt epochs, keeping its key, fingerprint and binding.
Parameters: tenant, key; additional_attempts (1-1000, default 1) added to the spent budget; request (optional: if given, it must match the reservation, else SE012); reason (optional, <= 1024 bytes, kept in the audit row).
Outcomes: the re-opened record (status pending, redrive_count + 1). The lattice allows this one move down, only from a dead-lettered failure, and the audit row keeps the previous error.
SQLSTATEs: SE001, SE002, SE008, SE010 (not found), SE011 (not dead-lettered: also what a second, concurrent redrive gets), SE012 (request differs).
Locking: the operation row (FOR UPDATE): concurrent redrives never double-open.
Idempotency: not idempotent by design; a repeat answers SE011 once the first has re-opened the operation.';

-- purge(older_than, batch_size) -> operations purged
create function settle.purge(older_than interval, batch_size integer default 1000)
returns integer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op record;
  v_count integer := 0;
  v_attempts integer;
  v_audit integer;
begin
  if older_than is null or older_than < interval '0' then
    perform settle_private._raise('SE008', 'older_than must be a non-negative interval',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));

  perform set_config('settle.purging', 'on', true);
  for v_op in
    select o.tenant, o.key, o.status, o.attempt, o.updated_at from settle_private.operations o
     where o.status in ('completed', 'failed') and o.updated_at < v_now - older_than
     order by o.updated_at
     limit batch_size
     for update skip locked
  loop
    delete from settle_private.attempts a where a.tenant = v_op.tenant and a.key = v_op.key;
    get diagnostics v_attempts = row_count;
    delete from settle_private.audit_log l where l.tenant = v_op.tenant and l.key = v_op.key;
    get diagnostics v_audit = row_count;
    delete from settle_private.operations o where o.tenant = v_op.tenant and o.key = v_op.key;
    v_writes := v_writes + settle_private._audit(v_op.tenant, v_op.key, v_now, 'purge', 'purged', v_op.attempt,
      v_op.status, null, session_user::text,
      jsonb_build_object('attempts', v_attempts, 'audit_rows', v_audit, 'last_updated_at', v_op.updated_at));
    v_count := v_count + 1;
  end loop;
  perform set_config('settle.purging', 'off', true);
  return v_count;
end
$$;

comment on function settle.purge(interval, integer) is
  'Retention: the only path that deletes. Removes terminal (completed or failed) operations last updated before now - older_than, with their attempts and audit rows, leaving one tombstone audit row (event purge) per purged key.
Parameters: older_than interval (>= 0), batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations purged. A purged key can be claimed again as a new operation.
SQLSTATEs: SE008. Locking: FOR UPDATE SKIP LOCKED (busy rows wait for the next call).
Idempotency: safe to repeat and to run concurrently.';

reset role;
