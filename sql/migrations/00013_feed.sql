-- 00013: the settlement feed: every final outcome delivered exactly once to named consumers,
-- in a commit-safe order (the design and its limits are in docs/feed.md).
--
-- Why: a settled payment still has to be posted to a ledger, credited, mailed: each exactly
-- once. Polling settle.settlements by settled_at loses settlements, because settled_at (and any
-- sequence number) is drawn when the statement runs, not when it commits: a transaction that
-- started earlier and commits later lands behind a cursor that has already moved on.
--
-- The feed:
--   * feed_events   one row per move of an operation INTO a final status (completed or failed,
--                   whoever writes it: complete, fail, the sweeper, settle.resolve, a DBA),
--                   written by the guard trigger of operations (00004) in the same transaction as the move. It
--                   keeps its own copy of the outcome, so settle.purge of the operation never
--                   takes an outcome a consumer has not acknowledged; settle.trim_feed removes
--                   events every registered consumer has passed.
--   * positions     an event's position is (position_xid, event_id): position_xid is the id of
--                   the writing transaction (pg_current_xact_id()), raised to the position of
--                   the key's previous event if that is higher (per-key order). A consumer reads
--                   only events whose position_xid is below the xmin of its snapshot
--                   (transaction-id fencing): every transaction below it has ended, so no event
--                   can commit later at a position the consumer has already passed.
--   * consumers     named, registered by an admin, with an optional tenant set and a number of
--                   lanes (events are spread over lanes by key, so a key's events stay in one
--                   lane, in order). Each lane has its own position and lease: the processes of
--                   one consumer share the lanes (SKIP LOCKED), never an event.
--   * delivery      read_feed leases a lane and returns a batch; ack_feed moves the lane's
--                   position under the lease token (a stale process is fenced, SE042). Read,
--                   apply and ack in one transaction: exactly once for an effect in this
--                   database; an external effect gets at least once with a stable delivery id
--                   (event_id).
--   * waking        a consumer that found nothing registers as a waiter for a few seconds; while
--                   a waiter is registered, the trigger sends NOTIFY settle_feed. Correctness
--                   never depends on it (consumers poll with backoff).

set local role settle_owner;

create table settle_private.feed_events (
  tenant text not null,
  key text not null,
  event_id bigint generated always as identity,
  -- The order of the feed: (position_xid, event_id). position_xid >= xid.
  position_xid xid8 not null,
  -- The transaction that wrote the outcome.
  xid xid8 not null,
  -- hashtext(key). Its key slot is (lane_hash & 2147483647) % 64 (64: the most lanes a consumer
  -- may have); the lane of a consumer with n lanes is slot % n.
  lane_hash integer not null,
  status settle.status not null,
  status_before settle.status not null,
  attempt integer not null,
  result jsonb,
  error jsonb,
  dead_letter_reason text,
  redrive_count integer not null,
  occurred_at timestamptz not null,
  -- No CHECK constraint (status is completed or failed: the trigger's first test): PostgreSQL
  -- 15 plans a table's CHECK constraints again for every INSERT statement (00002).
  -- The feed order is the key: consumers read by it, and it is the one index a completed
  -- outcome pays for. (On Citus, where a key must include the distribution column, the feed is
  -- per node: docs/feed.md, "Citus".)
  constraint feed_events_pkey primary key (position_xid, event_id)
);
comment on table settle_private.feed_events is
  'The settlement feed: one row per move of an operation into completed or failed, written in the same transaction by the guard trigger _100_guard_lattice of operations. Ordered by (position_xid, event_id). Private: read it with settle.read_feed.';

-- A key's next outcome follows only a failure: the trigger looks up the key's previous event
-- among the failures only, so a completed outcome (the common case) writes no entry here.
create index feed_events_failed_by_key_idx on settle_private.feed_events (tenant, key, event_id)
  where status = 'failed';
-- No index on occurred_at: only settle.reset_consumer to a time reads by it (a rare admin
-- call, a scan of the retained events), and every settlement would pay for it.

-- A lane's events in feed order, by key slot (a lane is the union of its slots: slot % lanes):
-- the lag of settle.feed_consumers and settle.metrics reads each slot from the lane's position
-- with a bounded index range scan, instead of scanning the retained feed once per lane (with a
-- large backlog and 64 lanes that was seconds per scrape). The one index an event pays for
-- beyond the feed order.
create index feed_events_by_slot_idx on settle_private.feed_events
  (((lane_hash & 2147483647) % 64), position_xid, event_id);

create table settle_private.feed_consumers (
  name text not null,
  tenants text[],
  lanes integer not null,
  registered_at timestamptz not null,
  registered_by text not null,
  constraint feed_consumers_pkey primary key (name),
  constraint lanes_in_range check (lanes between 1 and 64)
);
comment on table settle_private.feed_consumers is
  'Registered feed consumers: name, tenant set (NULL: every tenant) and number of lanes. Private: use settle.register_consumer / settle.drop_consumer.';

create table settle_private.feed_lanes (
  consumer text not null,
  lane integer not null,
  position_xid xid8 not null,
  position_id bigint not null,
  lease_token uuid,
  lease_expires_at timestamptz,
  leased_through_xid xid8,
  leased_through_id bigint,
  acked_at timestamptz,
  constraint feed_lanes_pkey primary key (consumer, lane),
  constraint feed_lanes_of_consumer foreign key (consumer)
    references settle_private.feed_consumers (name) on delete cascade,
  constraint lease_is_whole check ((lease_token is null) = (lease_expires_at is null)
    and (lease_token is null) = (leased_through_xid is null) and (lease_token is null) = (leased_through_id is null))
);
comment on table settle_private.feed_lanes is
  'Position and lease of each lane of each consumer. Private: moved by settle.read_feed, settle.ack_feed and settle.reset_consumer.';

-- Consumer processes waiting for the next event (pid of the waiting backend, until when). The
-- trigger notifies only while one is registered. Unlogged: it is a hint, lost on a crash.
create unlogged table settle_private.feed_waiters (
  pid integer not null,
  consumer text not null,
  until timestamptz not null,
  constraint feed_waiters_pkey primary key (pid)
);
comment on table settle_private.feed_waiters is
  'Consumer backends waiting for the next event (settle.await_feed); while one is registered the feed trigger sends NOTIFY settle_feed. A hint only.';

alter table settle_private.feed_events enable row level security;
alter table settle_private.feed_events force row level security;
alter table settle_private.feed_consumers enable row level security;
alter table settle_private.feed_consumers force row level security;
alter table settle_private.feed_lanes enable row level security;
alter table settle_private.feed_lanes force row level security;
alter table settle_private.feed_waiters enable row level security;
alter table settle_private.feed_waiters force row level security;
create policy owner_only on settle_private.feed_events to settle_owner using (true) with check (true);
create policy owner_only on settle_private.feed_consumers to settle_owner using (true) with check (true);
create policy owner_only on settle_private.feed_lanes to settle_owner using (true) with check (true);
create policy owner_only on settle_private.feed_waiters to settle_owner using (true) with check (true);
revoke all on settle_private.feed_events, settle_private.feed_consumers, settle_private.feed_lanes,
  settle_private.feed_waiters from public;

-- The lanes belong to their consumer for every writer. The foreign key feed_lanes_of_consumer
-- (its cascade and its check) does not fire under session_replication_role = replica, so these
-- triggers, enabled ALWAYS, do its work there too: a dropped consumer takes its lanes (else they
-- pin trim_feed below their position and the name cannot be registered again), and a lane names
-- a registered consumer (23503, the foreign key's SQLSTATE and name).
create function settle_private.tg_feed_consumers__drop_lanes()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  delete from settle_private.feed_lanes l where l.consumer = old.name;
  return null;
end
$$;

create function settle_private.tg_feed_lanes__guard_consumer()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if not exists (select 1 from settle_private.feed_consumers c where c.name = new.consumer) then
    raise exception using
      errcode = '23503',
      constraint = 'feed_lanes_of_consumer',
      schema = 'settle_private',
      table = 'feed_lanes',
      message = 'insert or update on table "feed_lanes" violates foreign key constraint "feed_lanes_of_consumer"',
      detail = jsonb_build_object('consumer', new.consumer, 'lane', new.lane)::text,
      hint = 'A consumer''s lanes are created by settle.register_consumer.';
  end if;
  return new;
end
$$;

create trigger _100_drop_lanes after delete on settle_private.feed_consumers
  for each row execute function settle_private.tg_feed_consumers__drop_lanes();
create trigger _100_guard_consumer before insert or update of consumer on settle_private.feed_lanes
  for each row execute function settle_private.tg_feed_lanes__guard_consumer();
alter table settle_private.feed_consumers enable always trigger _100_drop_lanes;
alter table settle_private.feed_lanes enable always trigger _100_guard_consumer;

-- ---------------------------------------------------------------------------------------
-- The event: one per move into a final status, in the writer's transaction. Written by the
-- guard of operations (settle_private.tg_operations__guard, 00004, trigger _100_guard_lattice,
-- which fires for every writer, replica mode included) once the lattice and the row rules have
-- accepted the row: one trigger call per settling UPDATE instead of a second trigger of its
-- own. No WHEN clause anywhere: PostgreSQL 15 reads back and plans a trigger's WHEN clause for
-- every UPDATE statement, which costs more than the call it would save.
-- ---------------------------------------------------------------------------------------

-- ---------------------------------------------------------------------------------------
-- Helpers
-- ---------------------------------------------------------------------------------------

-- The horizon of the caller's snapshot: every transaction with a smaller id has ended.
create function settle_private._feed_horizon()
returns xid8
language sql
stable
as $$
  select pg_snapshot_xmin(pg_current_snapshot())
$$;

-- The advisory lock key that serializes settle.trim_feed (shared) with the calls that move a
-- lane's position back (exclusive): register_consumer, reset_consumer.
create function settle_private._feed_positions_lock()
returns bigint
language sql
immutable
as $$
  select -8301926554122431017::bigint
$$;

-- The first key of the advisory lock read_feed takes as a marker of a lane it returned a batch
-- of (the second is the lane): pg_locks then names the consumer of a session's open batch.
create function settle_private._feed_lane_marker(consumer text)
returns integer
language sql
immutable
as $$
  select hashtext('pg-settle feed lane ' || consumer)
$$;

-- Whether the calling login may see a consumer: an unbound login every one, a login bound to
-- tenants (settle.grant_tenant) only one limited to tenants it holds.
create function settle_private._feed_visible(tenants text[])
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select (select settle_private._visible_tenants()) is null
      or (tenants is not null and tenants <@ (select settle_private._visible_tenants()))
$$;

-- The consumer row, or SE040. Consumer names are engine-wide: to a login bound to tenants a
-- consumer beyond them does not exist (the same SE040, with the same words, as an unknown
-- name), so that it learns nothing of another tenant's consumers. The refusal is written to the
-- server log (it survives the caller's rollback).
create function settle_private._feed_consumer(name text)
returns settle_private.feed_consumers
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
begin
  if name is null then
    perform settle_private._raise('SE008', 'consumer must not be null', jsonb_build_object('field', 'consumer'), null);
  end if;
  select * into v_c from settle_private.feed_consumers c where c.name = _feed_consumer.name;
  if found and not settle_private._feed_visible(v_c.tenants) then
    raise log 'pg-settle audit: %', jsonb_build_object('event', 'tenant_refused', 'call', 'feed',
      'role', session_user::text, 'consumer', v_c.name, 'at', clock_timestamp());
  end if;
  if not found or not settle_private._feed_visible(v_c.tenants) then
    perform settle_private._raise('SE040', 'no feed consumer of this name',
      jsonb_build_object('consumer', name), 'Register it first: settle.register_consumer (as settle_admin).');
  end if;
  return v_c;
end
$$;

-- The admin side of the same rule: a bound admin login registers only consumers limited to its
-- own tenants (SE019 for a request beyond them); another tenant's consumer does not exist for
-- its reset and drop (settle_private._feed_consumer).
create function settle_private._feed_check_admin(call text, tenants text[], consumer text)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_bound text[] := settle_private._visible_tenants();
begin
  if v_bound is not null and (tenants is null or not (tenants <@ v_bound)) then
    perform settle_private._refuse_bound(call, jsonb_build_object('consumer', consumer));
  end if;
end
$$;

-- Whether an event belongs to a lane of a consumer (lanes, tenants): its key slot (0-63,
-- feed_events_by_slot_idx) modulo the lanes.
create function settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[])
returns boolean
language sql
immutable
as $$
  select (lanes = 1 or ((lane_hash & 2147483647) % 64) % lanes = lane) and (tenants is null or tenant = any (tenants))
$$;

-- ---------------------------------------------------------------------------------------
-- Consumers (admin)
-- ---------------------------------------------------------------------------------------

create type settle.feed_consumer as (
  consumer text,
  tenants text[],
  lanes integer,
  registered_at timestamptz,
  registered_by text,
  created boolean
);
comment on type settle.feed_consumer is
  'Answer of settle.register_consumer: the consumer as registered; created is false when it already existed with the same definition.';

-- register_consumer(name, tenants, lanes, start_at) -> the consumer
create function settle.register_consumer(
  name text,
  tenants text[] default null,
  lanes integer default 1,
  start_at text default 'latest')
returns settle.feed_consumer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
  v_t text;
  v_now timestamptz := clock_timestamp();
  v_res settle.feed_consumer;
  v_xid xid8;
begin
  perform settle_private._check_name(register_consumer.name, 'name', 128, 'SE008');
  perform settle_private._check_count(register_consumer.lanes, 'lanes', 64);
  if start_at is null or start_at not in ('latest', 'earliest') then
    perform settle_private._raise('SE008', 'start_at must be latest or earliest',
      jsonb_build_object('field', 'start_at'), null);
  end if;
  if tenants is not null then
    if cardinality(tenants) = 0 then
      perform settle_private._raise('SE008', 'tenants must be NULL (every tenant) or a non-empty array',
        jsonb_build_object('field', 'tenants'), null);
    end if;
    foreach v_t in array tenants loop
      perform settle_private._check_name(v_t, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
    end loop;
    tenants := array(select distinct u from unnest(tenants) u order by u);
  end if;
  perform settle_private._feed_check_admin('register_consumer', register_consumer.tenants, register_consumer.name);

  select * into v_c from settle_private.feed_consumers c where c.name = register_consumer.name for update;
  if found then
    -- Names are engine-wide: a login bound to tenants learns that the name is taken, never
    -- the tenants or lanes of the consumer holding it (its own or another tenant's alike).
    if v_c.tenants is distinct from register_consumer.tenants or v_c.lanes <> register_consumer.lanes then
      perform settle_private._raise('SE041', 'a feed consumer of this name exists with another definition',
        case when settle_private._visible_tenants() is null
             then jsonb_build_object('consumer', v_c.name, 'tenants', v_c.tenants, 'lanes', v_c.lanes)
             else jsonb_build_object('consumer', v_c.name) end,
        'Drop it first (settle.drop_consumer), or register under another name.');
    end if;
    v_res := (v_c.name, v_c.tenants, v_c.lanes, v_c.registered_at, v_c.registered_by, false);
    return v_res;
  end if;

  -- latest: from the horizon on (events of transactions still running are delivered);
  -- earliest: every event still retained.
  -- A lane placed below the trim floor waits for a trim in progress (settle.trim_feed).
  perform pg_advisory_xact_lock(settle_private._feed_positions_lock());
  v_xid := case when start_at = 'latest' then settle_private._feed_horizon() else '0'::xid8 end;
  insert into settle_private.feed_consumers (name, tenants, lanes, registered_at, registered_by)
  values (register_consumer.name, register_consumer.tenants, register_consumer.lanes, v_now, session_user::text)
  returning * into v_c;
  insert into settle_private.feed_lanes (consumer, lane, position_xid, position_id)
  select v_c.name, l, v_xid, 0 from generate_series(0, v_c.lanes - 1) l;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'register_consumer', session_user::text,
          jsonb_build_object('consumer', v_c.name, 'tenants', v_c.tenants, 'lanes', v_c.lanes, 'start_at', start_at));
  v_res := (v_c.name, v_c.tenants, v_c.lanes, v_c.registered_at, v_c.registered_by, true);
  return v_res;
end
$$;

comment on function settle.register_consumer(text, text[], integer, text) is
  'Register a named feed consumer with its own position per lane.
Parameters: name (1-128 bytes, same rules as a key); tenants (NULL: every tenant; else the only tenants it receives: a tenant-bound login role may read only a consumer whose tenants it holds); lanes (1-64, default 1: the consumer''s processes share the work lane by lane, a key''s events stay in one lane); start_at latest (default: events from now on) or earliest (every event still retained).
Outcomes: the consumer (created true), or the existing one when it is registered already with the same tenants and lanes (created false). Logged in settle.admin_log.
SQLSTATEs: SE001 (a tenant), SE008 (name, lanes, start_at, empty tenants), SE019 (a tenant-bound login registering beyond its tenants), SE041 (exists with another definition; its tenants and lanes are in the detail for an unbound login only: consumer names are engine-wide, a tenant-bound login learns only that the name is taken).
Locking: the consumer row; a new consumer also the feed''s trim lock (an advisory lock: waits for a settle.trim_feed in progress). Idempotency: repeating the same registration returns the existing consumer.';

-- drop_consumer(name) -> whether it existed
create function settle.drop_consumer(name text)
returns boolean
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
begin
  if name is null then
    perform settle_private._raise('SE008', 'name must not be null', jsonb_build_object('field', 'name'), null);
  end if;
  select * into v_c from settle_private.feed_consumers c where c.name = drop_consumer.name for update;
  -- A consumer beyond the tenants of a bound login does not exist for it (settle_private._feed_consumer).
  if not found or not settle_private._feed_visible(v_c.tenants) then
    return false;
  end if;
  -- Wait for processes of this consumer that hold a lane in an open transaction.
  perform 1 from settle_private.feed_lanes l where l.consumer = drop_consumer.name for update;
  delete from settle_private.feed_consumers c where c.name = drop_consumer.name;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (clock_timestamp(), 'drop_consumer', session_user::text,
          jsonb_build_object('consumer', v_c.name, 'tenants', v_c.tenants, 'lanes', v_c.lanes));
  return true;
end
$$;

comment on function settle.drop_consumer(text) is
  'Drop a feed consumer and its positions: the events only it had not acknowledged become trimmable (settle.trim_feed).
Parameters: name.
Outcomes: true when it existed, false otherwise (to a tenant-bound login, a consumer beyond its tenants does not exist: false, nothing dropped). Logged in settle.admin_log.
SQLSTATEs: SE008 (name NULL).
Locking: waits for its lanes (a process holding one in an open transaction). Idempotency: a repeat returns false.';

-- ---------------------------------------------------------------------------------------
-- Delivery (settle_consumer)
-- ---------------------------------------------------------------------------------------

create type settle.feed_event as (
  consumer text,
  lane integer,
  lease_token uuid,
  lease_expires_at timestamptz,
  event_id bigint,
  position_xid xid8,
  tenant text,
  key text,
  status settle.status,
  status_before settle.status,
  attempt integer,
  result jsonb,
  error jsonb,
  dead_letter_reason text,
  redrive_count integer,
  occurred_at timestamptz
);
comment on type settle.feed_event is
  'One event of a batch from settle.read_feed: the lane and lease it was read under (pass lane, lease_token, position_xid and event_id of the last event handled to settle.ack_feed), the delivery id event_id (stable: a re-delivery carries the same id; use it as the downstream idempotency key), the operation (tenant, key), its final status and the status it moved from (unknown or conflict: a reconciliation was resolved), the attempt (the settled attempt for completed, the attempt epoch for failed), result or error, dead_letter_reason, redrive_count and when the outcome was written.';

-- read_feed(consumer, batch_size, lease) -> the next batch of one lane
create function settle.read_feed(consumer text, batch_size integer default 100, lease interval default '30 seconds')
returns setof settle.feed_event
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
  v_now timestamptz := clock_timestamp();
  v_horizon xid8;
  v_candidate record;
  v_lane settle_private.feed_lanes;
  v_token uuid;
  v_last record;
begin
  v_c := settle_private._feed_consumer(read_feed.consumer);
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  perform settle_private._check_lease(lease);
  v_horizon := settle_private._feed_horizon();

  -- Lanes that are free (no lease, or a lapsed one), least recently acknowledged first, each
  -- locked in turn (SKIP LOCKED: another process of this consumer holds it); the first that has
  -- an event below the horizon is leased and its batch returned. The locks last until the end
  -- of the caller's transaction.
  for v_candidate in
    select l.lane from settle_private.feed_lanes l
     where l.consumer = v_c.name and (l.lease_token is null or l.lease_expires_at <= v_now)
     order by l.acked_at nulls first, l.lane
  loop
    select * into v_lane from settle_private.feed_lanes l
     where l.consumer = v_c.name and l.lane = v_candidate.lane
       and (l.lease_token is null or l.lease_expires_at <= v_now)
     for update skip locked;
    continue when not found;
    select e.position_xid, e.event_id into v_last
      from settle_private.feed_events e
     where (e.position_xid, e.event_id) > (v_lane.position_xid, v_lane.position_id)
       and e.position_xid < v_horizon
       and settle_private._feed_in_lane(e.lane_hash, e.tenant, v_c.lanes, v_lane.lane, v_c.tenants)
     order by e.position_xid, e.event_id
     limit 1 offset batch_size - 1;
    if not found then
      -- Fewer than batch_size: the batch ends at the last event below the horizon.
      select e.position_xid, e.event_id into v_last
        from settle_private.feed_events e
       where (e.position_xid, e.event_id) > (v_lane.position_xid, v_lane.position_id)
         and e.position_xid < v_horizon
         and settle_private._feed_in_lane(e.lane_hash, e.tenant, v_c.lanes, v_lane.lane, v_c.tenants)
       order by e.position_xid desc, e.event_id desc
       limit 1;
      if not found then
        -- Nothing of this lane below the horizon: pass over the events of other lanes and
        -- tenants up to the newest one below it (none of them is this lane's), so that the
        -- next read does not scan them again and settle.trim_feed can remove them.
        select e.position_xid, e.event_id into v_last from settle_private.feed_events e
         where e.position_xid < v_horizon
         order by e.position_xid desc, e.event_id desc limit 1;
        if found and v_lane.lease_token is null
           and (v_last.position_xid, v_last.event_id) > (v_lane.position_xid, v_lane.position_id) then
          update settle_private.feed_lanes l
             set position_xid = v_last.position_xid, position_id = v_last.event_id
           where l.consumer = v_c.name and l.lane = v_lane.lane;
        end if;
        continue;
      end if;
    end if;
    v_token := gen_random_uuid();
    -- A marker, not a lock anyone waits for: pg_locks shows it for as long as the caller's
    -- transaction lasts, which the lane's row lock and lease (uncommitted until then) do not,
    -- so settle.feed_horizon can name a consumer process whose batch holds the horizon.
    perform pg_try_advisory_xact_lock(settle_private._feed_lane_marker(v_c.name), v_lane.lane);
    update settle_private.feed_lanes l
       set lease_token = v_token, lease_expires_at = settle_private._expiry(v_now, read_feed.lease),
           leased_through_xid = v_last.position_xid, leased_through_id = v_last.event_id
     where l.consumer = v_c.name and l.lane = v_lane.lane;
    return query
      select v_c.name, v_lane.lane, v_token, settle_private._expiry(v_now, read_feed.lease),
             e.event_id, e.position_xid, e.tenant, e.key, e.status, e.status_before, e.attempt, e.result, e.error,
             e.dead_letter_reason, e.redrive_count, e.occurred_at
        from settle_private.feed_events e
       where (e.position_xid, e.event_id) > (v_lane.position_xid, v_lane.position_id)
         and (e.position_xid, e.event_id) <= (v_last.position_xid, v_last.event_id)
         and settle_private._feed_in_lane(e.lane_hash, e.tenant, v_c.lanes, v_lane.lane, v_c.tenants)
       order by e.position_xid, e.event_id;
    return;
  end loop;
end
$$;

comment on function settle.read_feed(text, integer, interval) is
  'Read the next batch of a consumer: up to batch_size events of one lane, in feed order, leased to the caller.
Parameters: consumer; batch_size (1-100000, default 100); lease (1 second - 1 day, default 30 seconds): how long the lane stays with this caller without an ack.
Outcomes: the events (settle.feed_event), all of one lane and one lease; no rows when every lane is leased to another process or has nothing committed below the horizon (the oldest running transaction: see docs/feed.md). Events are returned only once their writing transaction and every older one has ended (transaction-id fencing), so no event can appear later behind the position.
Read, apply and settle.ack_feed in one transaction for exactly-once processing in this database: the lane stays locked until commit; a rollback (or a killed process) re-delivers the batch. Outside a transaction the lease is committed: a process that dies re-delivers after the lease lapses (at least once).
SQLSTATEs: SE008 (consumer NULL, batch_size), SE007 (lease), SE040 (no such consumer; to a login bound to tenants also a consumer not limited to them: the same answer, nothing disclosed).
Locking: the returned lane (FOR UPDATE SKIP LOCKED), until the end of the transaction. Idempotency: a repeat in the same transaction reads the next free lane; a repeat after a rollback reads the same batch.';

-- ack_feed(consumer, lane, lease_token, position_xid, event_id) -> whether the lease is released
create function settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint)
returns boolean
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
  v_lane settle_private.feed_lanes;
  v_done boolean;
begin
  v_c := settle_private._feed_consumer(ack_feed.consumer);
  if lane is null or lease_token is null or (ack_feed.position_xid is null) <> (ack_feed.event_id is null) then
    perform settle_private._raise('SE008', 'lane and lease_token are required; position_xid and event_id go together',
      jsonb_build_object('field', 'lane, lease_token, position_xid, event_id'), null);
  end if;
  select * into v_lane from settle_private.feed_lanes l
   where l.consumer = v_c.name and l.lane = ack_feed.lane for update;
  if not found or v_lane.lease_token is distinct from ack_feed.lease_token then
    perform settle_private._raise('SE042', 'the lease on this lane is no longer held',
      jsonb_build_object('consumer', v_c.name, 'lane', ack_feed.lane),
      'Another process took the lane after the lease lapsed, or the consumer was reset: the events will be delivered (again) to the holder. Read a new batch.');
  end if;
  if ack_feed.position_xid is not null and (
       (ack_feed.position_xid, ack_feed.event_id) <= (v_lane.position_xid, v_lane.position_id)
       or (ack_feed.position_xid, ack_feed.event_id) > (v_lane.leased_through_xid, v_lane.leased_through_id)) then
    perform settle_private._raise('SE008', 'the position is not one of the leased batch',
      jsonb_build_object('consumer', v_c.name, 'lane', ack_feed.lane, 'position_xid', ack_feed.position_xid::text,
                         'event_id', ack_feed.event_id),
      'Acknowledge the position_xid and event_id of an event read under this lease.');
  end if;
  v_done := ack_feed.position_xid is null
    or (ack_feed.position_xid, ack_feed.event_id) = (v_lane.leased_through_xid, v_lane.leased_through_id);
  update settle_private.feed_lanes l
     set position_xid = coalesce(ack_feed.position_xid, l.position_xid),
         position_id = coalesce(ack_feed.event_id, l.position_id),
         lease_token = case when v_done then null else l.lease_token end,
         lease_expires_at = case when v_done then null else l.lease_expires_at end,
         leased_through_xid = case when v_done then null else l.leased_through_xid end,
         leased_through_id = case when v_done then null else l.leased_through_id end,
         acked_at = case when ack_feed.position_xid is null then l.acked_at else clock_timestamp() end
   where l.consumer = v_c.name and l.lane = ack_feed.lane;
  return v_done;
end
$$;

comment on function settle.ack_feed(text, integer, uuid, xid8, bigint) is
  'Acknowledge a consumer''s events up to and including one event of the leased batch (all of it, or a prefix), moving the lane''s position.
Parameters: consumer; lane and lease_token as read_feed returned them; position_xid and event_id of the last event handled (both NULL: acknowledge nothing, release the lease: the batch is delivered again).
Outcomes: true when the lease is released (the whole batch is acknowledged, or nothing was), false when part of the batch is still leased.
SQLSTATEs: SE008 (missing arguments, a position outside the leased batch), SE040 (no such consumer, or one beyond the tenants of a tenant-bound login), SE042 (the lease is no longer held: the lane was taken over after the lease lapsed, or the consumer was reset or dropped and registered again).
Locking: the lane row (FOR UPDATE). Idempotency: an ack of a released lease is SE042; call it in the transaction that applied the events for exactly-once processing.';

-- await_feed(consumer, seconds) -> true (registered as a waiter)
create function settle.await_feed(consumer text, seconds integer default 5)
returns boolean
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
begin
  v_c := settle_private._feed_consumer(await_feed.consumer);
  perform settle_private._check_count(seconds, 'seconds', 60);
  insert into settle_private.feed_waiters as w (pid, consumer, until)
  values (pg_backend_pid(), v_c.name, clock_timestamp() + make_interval(secs => seconds))
  on conflict on constraint feed_waiters_pkey do update set consumer = excluded.consumer, until = excluded.until;
  return true;
end
$$;

comment on function settle.await_feed(text, integer) is
  'Register the calling backend as waiting for the feed: for the next `seconds`, every final outcome sends NOTIFY settle_feed (LISTEN settle_feed on this connection first). A wake-up hint only: read_feed decides what is delivered.
Parameters: consumer; seconds (1-60, default 5).
Outcomes: true.
SQLSTATEs: SE008 (seconds), SE040 (no such consumer, or one beyond the tenants of a tenant-bound login).
Locking: none beyond its own waiter row. Idempotency: a repeat extends the wait.';

-- ---------------------------------------------------------------------------------------
-- Operations (admin)
-- ---------------------------------------------------------------------------------------

create type settle.feed_reset as (
  consumer text,
  lane integer,
  position_before text,
  position_after text,
  events_to_deliver bigint,
  applied boolean
);
comment on type settle.feed_reset is
  'One lane of settle.reset_consumer: positions before and after (position_xid/event_id), how many retained events the lane will deliver from the new position, and whether the reset was applied (false for a dry run).';

-- reset_consumer(name, to_time, dry_run) -> one row per lane
create function settle.reset_consumer(name text, to_time timestamptz default null, dry_run boolean default false)
returns setof settle.feed_reset
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_c settle_private.feed_consumers;
  v_xid xid8;
  v_id bigint;
  v_lane settle_private.feed_lanes;
  v_res settle.feed_reset;
  v_horizon xid8 := settle_private._feed_horizon();
begin
  if dry_run is null then
    perform settle_private._raise('SE008', 'dry_run must not be null', jsonb_build_object('field', 'dry_run'), null);
  end if;
  v_c := settle_private._feed_consumer(reset_consumer.name);
  -- A lane moved back waits for a trim in progress, and the next trim sees it (settle.trim_feed).
  if not dry_run then
    perform pg_advisory_xact_lock(settle_private._feed_positions_lock());
  end if;
  -- Never above the horizon: a transaction still running (its id is at or above the horizon)
  -- may yet commit an event written after to_time at a position below every committed one, and
  -- a lane placed above it would never deliver it. So the lane goes just before the first
  -- retained event written at or after to_time, or to the horizon if that is lower (committed
  -- events between the two are delivered again: a reset re-delivers, it never skips).
  v_xid := v_horizon;
  v_id := 0;
  if to_time is not null then
    select e.position_xid, e.event_id - 1 into v_xid, v_id from settle_private.feed_events e
     where e.occurred_at >= to_time
     order by e.position_xid, e.event_id limit 1;
    if not found or (v_xid, v_id) > (v_horizon, 0::bigint) then
      v_xid := v_horizon;
      v_id := 0;
    end if;
  end if;
  for v_lane in
    select * from settle_private.feed_lanes l where l.consumer = v_c.name order by l.lane for update
  loop
    v_res.consumer := v_c.name;
    v_res.lane := v_lane.lane;
    v_res.position_before := v_lane.position_xid::text || '/' || v_lane.position_id;
    v_res.position_after := v_xid::text || '/' || v_id;
    select count(*) into v_res.events_to_deliver from settle_private.feed_events e
     where (e.position_xid, e.event_id) > (v_xid, v_id)
       and settle_private._feed_in_lane(e.lane_hash, e.tenant, v_c.lanes, v_lane.lane, v_c.tenants);
    v_res.applied := not dry_run;
    if not dry_run then
      update settle_private.feed_lanes l
         set position_xid = v_xid, position_id = v_id, lease_token = null, lease_expires_at = null,
             leased_through_xid = null, leased_through_id = null
       where l.consumer = v_c.name and l.lane = v_lane.lane;
    end if;
    return next v_res;
  end loop;
  if not dry_run then
    insert into settle_private.admin_log (at, event, actor, detail)
    values (clock_timestamp(), 'reset_consumer', session_user::text,
            jsonb_build_object('consumer', v_c.name, 'to_time', to_time, 'position', v_xid::text || '/' || v_id));
  end if;
end
$$;

comment on function settle.reset_consumer(text, timestamptz, boolean) is
  'Move every lane of a consumer to a new position: re-deliver retained events, or skip a backlog.
Parameters: name; to_time (NULL, default: skip to now, everything committed is passed over; a time: deliver again every retained event from the first one written at or after it, in feed order; ''-infinity'': every retained event. The lane never goes above the horizon: an outcome of a transaction still running is delivered when it commits, and committed events above the horizon are delivered again); dry_run (default false: only report).
Outcomes: one row per lane (settle.feed_reset): positions before and after, events the lane will deliver, applied. Leases are cleared: a process still holding one is fenced at its next ack (SE042). Logged in settle.admin_log.
SQLSTATEs: SE008 (dry_run NULL), SE040 (no such consumer; to a tenant-bound login also a consumer beyond its tenants: the same answer).
Locking: the consumer''s lanes (FOR UPDATE): waits for a process holding one in an open transaction; unless dry_run, the feed''s trim lock (an advisory lock: waits for a settle.trim_feed in progress). Idempotency: repeating it moves to the same position (when no event was written in between).';

-- trim_feed(batch_size) -> events deleted
create function settle.trim_feed(batch_size integer default 10000)
returns integer
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_floor_xid xid8;
  v_floor_id bigint;
  v_count integer;
begin
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('trim_feed', '{}'::jsonb);
  end if;
  -- Serialized with the calls that move a lane's position back (register_consumer from the
  -- earliest event, reset_consumer) by an advisory lock, not by the lanes' rows: a consumer holds
  -- its lane's row (FOR UPDATE) for its whole read-apply-ack transaction, and trimming (and the
  -- upkeep job that runs it) must never wait for a slow consumer. Acks only move positions
  -- forward, so a floor read before an ack commits is lower: it deletes less, never more.
  perform pg_advisory_xact_lock_shared(settle_private._feed_positions_lock());
  -- The lowest position of any lane of any consumer; with no consumer, the horizon. An event
  -- at or below it has been acknowledged by every registered consumer.
  select l.position_xid, l.position_id into v_floor_xid, v_floor_id from settle_private.feed_lanes l
   order by l.position_xid, l.position_id limit 1;
  if not found then
    v_floor_xid := settle_private._feed_horizon();
    v_floor_id := 0;
  end if;
  delete from settle_private.feed_events e
   where (e.position_xid, e.event_id) in (
     select d.position_xid, d.event_id from settle_private.feed_events d
      where (d.position_xid, d.event_id) <= (v_floor_xid, v_floor_id)
        and d.position_xid < settle_private._feed_horizon()
      order by d.position_xid, d.event_id
      limit batch_size);
  get diagnostics v_count = row_count;
  return v_count;
end
$$;

comment on function settle.trim_feed(integer) is
  'Feed retention: delete events every registered consumer has acknowledged (at or below the lowest lane position); with no consumer registered, every event below the horizon.
Parameters: batch_size (1-100000, default 10000); call again while it returns a full batch.
Outcomes: the number of events deleted. An event a registered consumer has not acknowledged is never deleted, by this or by settle.purge (which deletes operations, never feed events).
SQLSTATEs: SE008 (batch_size), SE019 (a tenant-bound login: retention is engine-wide).
Locking: no lane row (a consumer holding its batch in an open transaction never makes it wait); a shared advisory lock that register_consumer and reset_consumer take exclusively, so a lane moved back waits for a trim in progress and the next trim sees it. Idempotency: safe to repeat and to run concurrently.';

-- ---------------------------------------------------------------------------------------
-- Views and metrics
-- ---------------------------------------------------------------------------------------

-- The transactions holding the feed's horizon back, oldest first: every session with a
-- transaction id (any database of the cluster: ids are cluster-wide) and every prepared
-- transaction. A session that holds a lease of a feed consumer's lane (its read-apply-ack
-- transaction) is named as such. A login bound to tenants sees no login or application_name,
-- and only the names of consumers within its tenants.
create function settle_private._feed_horizon_holders()
returns table (pid integer, login text, application_name text, state text, xid text, xid_age integer,
               xact_age_seconds double precision, holds_horizon boolean, feed_consumer boolean,
               consumer text, lane integer)
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  with w as (select settle_private._visible_tenants() as tenants, xid(settle_private._feed_horizon()) as horizon),
  x as (
    select a.pid, a.usename::text as login, a.application_name::text as app, a.state::text as state,
           a.backend_xid as xid, a.xact_start as started
      from pg_stat_activity a
     where a.backend_xid is not null and a.pid <> pg_backend_pid()
    union all
    select null, p.owner::text, 'prepared transaction ' || p.gid, 'prepared', p.transaction, p.prepared
      from pg_prepared_xacts p
  )
  select x.pid,
         case when w.tenants is null then x.login end,
         case when w.tenants is null then x.app end,
         x.state, x.xid::text, age(x.xid),
         extract(epoch from clock_timestamp() - x.started)::float8,
         x.xid = w.horizon,
         f.consumer is not null,
         case when w.tenants is null or f.tenants <@ w.tenants then f.consumer end,
         case when w.tenants is null or f.tenants <@ w.tenants then f.lane end
    from x cross join w
    left join lateral (
      select c.name as consumer, k.objid::integer as lane, c.tenants
        from pg_locks k
        join settle_private.feed_consumers c
          on k.classid::bigint = (settle_private._feed_lane_marker(c.name)::bigint & 4294967295)
       where x.pid is not null and k.pid = x.pid and k.locktype = 'advisory' and k.objsubid = 2 and k.granted
         and k.objid::bigint < c.lanes
       order by c.name, k.objid limit 1) f on true
   order by age(x.xid) desc, x.pid
   limit 100
$$;
comment on function settle_private._feed_horizon_holders() is
  'Rows of settle.feed_horizon (the transactions holding the feed''s horizon back). Internal: read the view.';

create view settle.feed_horizon as
select h.pid, h.login, h.application_name, h.state, h.xid, h.xid_age, h.xact_age_seconds, h.holds_horizon,
       h.feed_consumer, h.consumer, h.lane
  from settle_private._feed_horizon_holders() h;
comment on view settle.feed_horizon is
  'The transactions that hold the settlement feed''s horizon back, oldest first (at most 100): every session of the cluster with a transaction id, and every prepared transaction (pid NULL). holds_horizon: this one is the oldest, no consumer receives an event written after it until it ends. feed_consumer: the session holds a lease of a feed consumer''s lane (its read-apply-ack transaction; consumer and lane name it, for a login bound to tenants only a consumer within them). xact_age_seconds and state are NULL where the engine''s owner may not read them (docs/feed.md); login and application_name are NULL for a login bound to tenants.';

-- Per lane of each consumer: its position, lease, and lag: events retained beyond the position
-- and the age of the oldest. A lane is the union of its key slots (slot % lanes = lane); each
-- slot is read from the lane's position through feed_events_by_slot_idx, at most 1,000 events
-- per slot: a scrape reads at most 64,000 index entries per consumer whatever the backlog, and
-- never the events of other lanes. Without bitmap scans: the planner otherwise reads every
-- entry of a slot beyond the position into a bitmap and sorts it, where the ordered index scan
-- stops after 1,000. The order names the whole index key, slot first: the slot is a lateral
-- parameter, not a constant, so ordered by the position alone the planner read every entry of the
-- slot beyond the position and sorted them (test/console/metrics-plan.test.ts).
create function settle_private._feed_lag()
returns table (consumer text, tenants text[], lanes integer, lane integer, position_xid xid8, position_id bigint,
               leased boolean, lease_expires_at timestamptz, acked_at timestamptz,
               lag_events bigint, oldest_unacked_at timestamptz, lag_seconds double precision)
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
set jit = off
set enable_bitmapscan = off
as $$
  select c.name, c.tenants, c.lanes, l.lane, l.position_xid, l.position_id,
         l.lease_token is not null and l.lease_expires_at > clock_timestamp(), l.lease_expires_at, l.acked_at,
         s.events, s.oldest,
         coalesce(extract(epoch from clock_timestamp() - s.oldest)::float8, 0)
    from settle_private.feed_consumers c
    join settle_private.feed_lanes l on l.consumer = c.name
    cross join lateral (
      select coalesce(sum(n.events), 0)::bigint as events, min(n.oldest) as oldest
        from generate_series(l.lane, 63, c.lanes) g(slot)
        cross join lateral (
          select count(*) filter (where c.tenants is null or x.tenant = any (c.tenants)) as events,
                 min(x.occurred_at) filter (where c.tenants is null or x.tenant = any (c.tenants)) as oldest
            from (select e.tenant, e.occurred_at from settle_private.feed_events e
                   where ((e.lane_hash & 2147483647) % 64) = g.slot
                     and (e.position_xid, e.event_id) > (l.position_xid, l.position_id)
                   order by ((e.lane_hash & 2147483647) % 64), e.position_xid, e.event_id
                   limit 1000) x) n) s
   where (select settle_private._visible_tenants()) is null
      or c.tenants <@ (select settle_private._visible_tenants())
$$;
comment on function settle_private._feed_lag() is
  'Rows of settle.feed_consumers (position, lease and lag per lane). Internal: read the view.';

create view settle.feed_consumers as
select f.consumer, f.tenants, f.lanes, f.lane, f.position_xid::text || '/' || f.position_id as position,
       f.leased, f.lease_expires_at, f.acked_at, f.lag_events, f.oldest_unacked_at, f.lag_seconds
  from settle_private._feed_lag() f;
comment on view settle.feed_consumers is
  'One row per lane of each registered feed consumer: its position (position_xid/event_id), whether a process holds its lease and until when, when it last acknowledged, and its lag: events written beyond the position (committed or not yet visible; counted up to 1,000 in each of the lane''s key slots, a lane having 64/lanes slots) and the age of the oldest of them in seconds. A lag in seconds that grows while lag_events stays small means a long transaction holds the horizon back: settle.feed_horizon names it (docs/feed.md).';

-- settle.metrics gains the feed's gauges (the columns of 00011 first, unchanged). The lanes
-- are read once (settle_private._feed_lag, bounded per slot); the retained events are counted
-- up to 1,000,000 (an index-only count of the feed order).
create function settle_private._feed_metrics()
returns table (feed_consumers bigint, feed_lag_events bigint, feed_lag_seconds double precision,
               feed_events_retained bigint, feed_horizon_age_seconds double precision, feed_horizon_xid_age bigint,
               feed_horizon_held_by_consumer bigint)
language sql
stable
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  with f as materialized (select g.lane, g.lag_events, g.lag_seconds from settle_private._feed_lag() g),
       h as materialized (select x.xact_age_seconds, x.xid_age, x.feed_consumer
                            from settle_private._feed_horizon_holders() x where x.holds_horizon)
  select (select count(*) from f where f.lane = 0),
         coalesce((select max(f.lag_events) from f), 0),
         coalesce((select max(f.lag_seconds) from f), 0),
         (select count(*) from (select 1 from settle_private.feed_events e
                                 where (select settle_private._visible_tenants()) is null
                                    or e.tenant = any ((select settle_private._visible_tenants())::text[])
                                 limit 1000000) n),
         coalesce((select max(h.xact_age_seconds) from h), 0),
         coalesce((select max(h.xid_age) from h), 0)::bigint,
         (select count(*) from h where h.feed_consumer)
$$;
comment on function settle_private._feed_metrics() is
  'The feed gauges of settle.metrics (one row). Internal: read settle.metrics.';

create or replace view settle.metrics as
select m.*, f.feed_consumers, f.feed_lag_events, f.feed_lag_seconds, f.feed_events_retained
  from settle_private._metrics() m, settle_private._feed_metrics() f;

-- settle.feed_events: a key's feed events and which consumers have passed them. An operator
-- reading one operation (the console's operation page, docs/operations.md) asks "did the ledger
-- get it?"; settle.feed_consumers says where each consumer's lanes stand, this view where each
-- retained event stands for every consumer. It reads like the other views: a login bound to
-- tenants sees only its tenants' events, and only the consumers limited to its tenants. A lookup
-- by key scans the retained events, which trim_feed keeps to what some consumer has not passed.
create view settle.feed_events as
select e.tenant, e.key, e.event_id, e.position_xid::text || '/' || e.event_id as position, e.status, e.status_before,
       e.attempt, e.occurred_at,
       array(select c.name from settle_private.feed_consumers c join settle_private.feed_lanes l on l.consumer = c.name
              where settle_private._feed_in_lane(e.lane_hash, e.tenant, c.lanes, l.lane, c.tenants)
                and (l.position_xid, l.position_id) >= (e.position_xid, e.event_id)
                and ((select settle_private._visible_tenants()) is null or c.tenants <@ (select settle_private._visible_tenants()))
              order by c.name) as acked_by,
       array(select c.name from settle_private.feed_consumers c join settle_private.feed_lanes l on l.consumer = c.name
              where settle_private._feed_in_lane(e.lane_hash, e.tenant, c.lanes, l.lane, c.tenants)
                and (l.position_xid, l.position_id) < (e.position_xid, e.event_id)
                and ((select settle_private._visible_tenants()) is null or c.tenants <@ (select settle_private._visible_tenants()))
              order by c.name) as pending_for
  from settle_private.feed_events e
 where (select settle_private._visible_tenants()) is null
    or e.tenant = any ((select settle_private._visible_tenants())::text[]);
comment on view settle.feed_events is
  'The retained settlement-feed events (one per move of an operation into completed or failed) with their feed position (position_xid/event_id), and per event the registered consumers whose lane has passed it (acked_by: acknowledged, or skipped by a reset) and those that still have to deliver it (pending_for). Events every consumer has passed are removed by settle.trim_feed. A lookup by tenant and key scans the retained events.';

reset role;
