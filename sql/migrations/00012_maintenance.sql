-- 00012: maintenance: settle.redrive and settle.purge (the sweeper, settle.expire_leases, is
-- with the leases in 00009).
--
-- Why: operators re-open dead letters and enforce retention; both are audited, both lock the
-- operation rows they touch, and neither can break the lattice (the guard triggers of 00004
-- allow exactly one move down: redrive of a failure every attempt recorded).

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
  v_status settle.status;
begin
  perform settle_private._check_operation_key(redrive.tenant, redrive.key);
  perform settle_private._check_count(additional_attempts, 'additional_attempts', settle_private._limit('max_attempts'));
  if reason is not null and octet_length(reason) > settle_private._limit('reason_bytes') then
    perform settle_private._raise('SE008', format('reason must be at most %s bytes', settle_private._limit('reason_bytes')),
      jsonb_build_object('field', 'reason'), null);
  end if;

  -- A login bound to other tenants learns nothing of this one: refused before anything is read
  -- (no SE010, SE011 or SE012 that would tell whether the key exists or what state it is in).
  if not settle_private._tenant_ok(redrive.tenant) then
    perform settle_private._refuse_tenant(redrive.tenant, redrive.key, 'redrive');
  end if;
  v_op := settle_private._lock_operation(redrive.tenant, redrive.key);
  if redrive.request is not null and settle_private._fingerprint(redrive.request) <> v_op.fingerprint then
    perform settle_private._raise('SE012', 'redrive refused: the request differs from the reservation',
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key),
      'A redrive re-runs the reserved request; a changed intent needs a new key.');
  end if;
  if v_op.dead_lettered_at is null then
    perform settle_private._raise('SE011', format('only dead-lettered operations can be redriven (status %s)', v_op.status),
      jsonb_build_object('tenant', redrive.tenant, 'key', redrive.key, 'status', v_op.status,
                         'dead_lettered', v_op.dead_lettered_at is not null),
      'See settle.dead_letters.');
  end if;

  -- A failure every attempt recorded (attempts_exhausted) re-opens as pending. An operation
  -- that needs reconciliation keeps its status (unknown or conflict): redrive never lowers it,
  -- so a later success of any attempt still settles it and the record keeps saying that an
  -- effect may have happened.
  update settle_private.operations o
     set status = case when v_op.dead_letter_reason = 'attempts_exhausted' then 'pending'::settle.status
                       else v_op.status end,
         dead_lettered_at = null, dead_letter_reason = null, error = null, redrive_count = v_op.redrive_count + 1,
         max_attempts = v_op.attempt + redrive.additional_attempts, updated_at = v_now
   where o.tenant = redrive.tenant and o.key = redrive.key
  returning o.status into v_status;
  v_writes := v_writes + settle_private._audit(redrive.tenant, redrive.key, v_now, 'redrive', 'redriven', v_op.attempt,
    v_op.status, v_status, session_user::text,
    jsonb_build_object('additional_attempts', additional_attempts, 'reason', reason,
                       'previous_error', v_op.error, 'dead_letter_reason', v_op.dead_letter_reason,
                       'redrive_count', v_op.redrive_count + 1));
  return query select * from settle.operations v where v.tenant = redrive.tenant and v.key = redrive.key;
end
$$;

comment on function settle.redrive(text, text, integer, jsonb, text) is
  'Re-open a dead-lettered operation for new attempt epochs, keeping its key, fingerprint and binding.
Parameters: tenant, key; additional_attempts (1-1000, default 1) added to the spent budget; request (optional: if given, it must match the reservation, else SE012); reason (optional, <= 1024 bytes, kept in the audit row).
Outcomes: the re-opened record (redrive_count + 1, budget raised). Dead letter reason attempts_exhausted: status pending (the lattice allows this one move down, only when every attempt recorded a failure; the audit row keeps the previous error). Reason needs_reconciliation: the status stays unknown (or conflict), never lower: redrive only after checking downstream that the effect did not happen (or that the downstream deduplicates it), since the next attempt runs it again.
SQLSTATEs: SE001, SE002, SE008, SE013 (the caller is bound to other tenants: raised before anything is read), SE010 (not found), SE011 (not dead-lettered: also what a second, concurrent redrive gets), SE012 (request differs).
Locking: the operation row (FOR UPDATE): concurrent redrives never double-open.
Idempotency: not idempotent by design; a repeat answers SE011 once the first has re-opened the operation.';

-- Retention's step for one operation found by purge's lock-free scan: lock the row without
-- waiting, check again that it is terminal and older than `cutoff`, and delete its attempts,
-- audit rows and the operation, leaving one tombstone audit row. Returns 1 (purged) or 0.
-- The delete guard (00004) admits deletes only while settle.purging is on, which is set here,
-- in the backend that deletes: on Citus this step is delegated to the worker holding the key
-- (force_delegation, sql/citus/distribute.sql), where a setting made by the coordinator's
-- session would not be seen.
create function settle_private._purge_key(tenant text, key text, cutoff timestamptz, as_of timestamptz, actor text)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_writes integer := 0;
  v_op record;
  v_attempts integer;
  v_logged integer;
  v_audit integer;
  v_overflow bigint;
begin
  select o.tenant, o.key, o.status, o.attempt, o.claim_seq, o.settled_seq, o.updated_at into v_op from settle_private.operations o
   where o.tenant = _purge_key.tenant and o.key = _purge_key.key
     and o.status in ('completed', 'failed') and o.dead_lettered_at is null and o.updated_at < _purge_key.cutoff
   for update skip locked;
  if not found then
    return 0;
  end if;
  -- audit_rows in the tombstone counts the trail as settle.audit_log showed it: the rows of
  -- audit_log and the events logged on the attempt records and the operation (the current
  -- attempt's claim while it has no record, the settlement).
  v_attempts := v_op.attempt;
  select coalesce(sum((a.claim_seq is not null)::integer), 0)
         + case when bool_or(a.attempt = v_op.attempt) is not true and v_op.claim_seq is not null then 1 else 0 end
         + case when v_op.settled_seq is not null then 1 else 0 end
    into v_logged
    from settle_private.attempts a where a.tenant = v_op.tenant and a.key = v_op.key;
  perform set_config('settle.purging', 'on', true);
  delete from settle_private.attempts a where a.tenant = v_op.tenant and a.key = v_op.key;
  delete from settle_private.audit_log l where l.tenant = v_op.tenant and l.key = v_op.key;
  get diagnostics v_audit = row_count;
  delete from settle_private.audit_overflow x where x.tenant = v_op.tenant and x.key = v_op.key
  returning x.refusals into v_overflow;
  delete from settle_private.operations o where o.tenant = v_op.tenant and o.key = v_op.key;
  perform set_config('settle.purging', 'off', true);
  v_writes := v_writes + settle_private._audit(v_op.tenant, v_op.key, _purge_key.as_of, 'purge', 'purged', v_op.attempt,
    v_op.status, null, _purge_key.actor,
    jsonb_build_object('attempts', v_attempts, 'audit_rows', v_audit + v_logged, 'last_updated_at', v_op.updated_at)
    || case when v_overflow is not null then jsonb_build_object('overflow_refusals', v_overflow) else '{}'::jsonb end);
  return 1;
end
$$;

-- Retention's step for a purged key: its tombstone and the rows written after it
-- (calls on the purged key, refused and audited, and their overflow row) are deleted once the
-- key has no operation and none of its rows is as recent as `cutoff`. A key claimed again keeps
-- its tombstone with its new operation (deleted with it, by _purge_key); a key still called
-- keeps its rows until the calls stop for a whole retention period. Returns 1 (deleted) or 0.
create function settle_private._purge_tombstone(tenant text, key text, cutoff timestamptz)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if exists (select 1 from settle_private.operations o where o.tenant = _purge_tombstone.tenant and o.key = _purge_tombstone.key)
     or exists (select 1 from settle_private.audit_log l
                 where l.tenant = _purge_tombstone.tenant and l.key = _purge_tombstone.key and l.at >= _purge_tombstone.cutoff)
     or exists (select 1 from settle_private.audit_overflow x
                 where x.tenant = _purge_tombstone.tenant and x.key = _purge_tombstone.key and x.last_at >= _purge_tombstone.cutoff) then
    return 0;
  end if;
  perform set_config('settle.purging', 'on', true);
  delete from settle_private.audit_log l where l.tenant = _purge_tombstone.tenant and l.key = _purge_tombstone.key;
  delete from settle_private.audit_overflow x where x.tenant = _purge_tombstone.tenant and x.key = _purge_tombstone.key;
  perform set_config('settle.purging', 'off', true);
  return 1;
end
$$;

-- purge(older_than, batch_size) -> operations purged
create function settle.purge(older_than interval, batch_size integer default 1000)
returns integer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  -- Plain values as the per-key call's arguments (see settle.expire_leases).
  v_actor text := session_user::text;
  -- A login bound to tenants purges only their operations (docs/protocol.md §12).
  v_mine text[] := settle_private._visible_tenants();
  v_cutoff timestamptz;
  v_min interval;
  v_due record;
  v_done integer;
  v_count integer := 0;
begin
  if older_than is null or older_than < interval '0' or not settle_private._exact(older_than) then
    perform settle_private._raise('SE008', 'older_than must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  -- Retention never shorter than the configured minimum (default 24 hours): a typo such as
  -- '1 minute' for '1 month' must not delete what callers may still retry.
  select s.value into v_min from settle_private.settings s where s.name = 'purge_min_retention';
  if older_than < coalesce(v_min, interval '24 hours') then
    perform settle_private._raise('SE014', 'older_than is shorter than the minimum retention',
      jsonb_build_object('older_than', older_than::text, 'purge_min_retention', coalesce(v_min, interval '24 hours')::text),
      'Purge older rows, or lower the minimum explicitly as settle_admin: select settle.set_purge_min_retention(interval ''...'').');
  end if;
  v_cutoff := v_now - older_than;

  -- A lock-free scan for candidates, then one locked, re-checked step per key
  -- (settle_private._purge_key), called in the FROM form so that Citus delegates it.
  for v_due in
    select o.tenant, o.key from settle_private.operations o
     where o.status in ('completed', 'failed') and o.dead_lettered_at is null and o.updated_at < v_cutoff
       and (v_mine is null or o.tenant = any (v_mine))
     order by o.updated_at
     limit batch_size
  loop
    select r into v_done from settle_private._purge_key(v_due.tenant, v_due.key, v_cutoff, v_now, v_actor) r;
    v_count := v_count + v_done;
  end loop;

  -- Then the tombstones older than the cutoff, with what hangs off them (_purge_tombstone), in
  -- what is left of the batch. They are not counted: purge answers the operations it purged.
  if v_count < batch_size then
    for v_due in
      select l.tenant, l.key from settle_private.audit_log l
       where l.event = 'purge' and l.at < v_cutoff
         and (v_mine is null or l.tenant = any (v_mine))
       order by l.at
       limit batch_size - v_count
    loop
      select r into v_done from settle_private._purge_tombstone(v_due.tenant, v_due.key, v_cutoff) r;
    end loop;
  end if;
  return v_count;
end
$$;

comment on function settle.purge(interval, integer) is
  'Retention: the only path that deletes. Removes terminal (completed or failed) operations last updated before now - older_than, with their attempts and audit rows, leaving one tombstone audit row (event purge) per purged key. A tombstone older than the cutoff is removed in a later call, with the rows of calls made on the purged key after it (and their overflow count), once the key has no operation and none of those rows is younger than the cutoff.
Parameters: older_than interval (>= 0), batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations purged. A purged key can be claimed again as a new operation. A login bound to tenants purges only their operations.
SQLSTATEs: SE008, SE014. Locking: finds candidates without locks, then locks each one (FOR UPDATE SKIP LOCKED: a busy row waits for the next call) and checks it again under the lock.
Idempotency: safe to repeat and to run concurrently.';

-- set_purge_min_retention(min_retention) -> the new minimum
create function settle.set_purge_min_retention(min_retention interval)
returns interval
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := clock_timestamp();
  v_before interval;
begin
  if min_retention is null or min_retention < interval '0' or not settle_private._exact(min_retention) then
    perform settle_private._raise('SE008', 'min_retention must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'min_retention'), null);
  end if;
  -- An engine-wide setting: not for a login bound to tenants (SE019).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_purge_min_retention', '{}'::jsonb);
  end if;
  select s.value into v_before from settle_private.settings s where s.name = 'purge_min_retention' for update;
  insert into settle_private.settings as s (name, value, updated_at)
  values ('purge_min_retention', min_retention, v_now)
  on conflict on constraint settings_pkey do update set value = excluded.value, updated_at = excluded.updated_at;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'set_purge_min_retention', session_user::text,
          jsonb_build_object('before', v_before::text, 'after', min_retention::text));
  return min_retention;
end
$$;

comment on function settle.set_purge_min_retention(interval) is
  'Set the shortest retention settle.purge accepts (default 24 hours).
Parameters: min_retention, a non-negative exact duration (no month or year part).
Outcomes: the new minimum; the change is logged in settle.admin_log (event set_purge_min_retention, before and after). settle.purge with older_than below it raises SE014.
SQLSTATEs: SE008 (bad min_retention), SE019 (the caller is bound to tenants: engine-wide settings are for unbound admins). Locking: the settings row (FOR UPDATE). Idempotency: setting the same value again changes nothing but the log.';

reset role;
