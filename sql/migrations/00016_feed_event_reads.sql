-- 00016: settle.feed_events, a key's settlement-feed events and which consumers have passed them.
--
-- Why: an operator reading one operation (the console's operation page, docs/operations.md)
-- asks "did the ledger get it?". settle.feed_consumers says where each consumer's lanes stand,
-- but an event's own position was private (settle.read_feed hands events to consumers only).
-- This view shows, per retained event, the consumers whose lane position has passed it
-- (acknowledged) and those that still have to deliver it. It reads like the other views: a login
-- bound to tenants sees only its tenants' events, and only the consumers limited to its tenants
-- (as settle.feed_consumers shows them).
--
-- Cost: the feed keeps one index, its order (position_xid, event_id), so that a settlement pays
-- for one index entry; a lookup by key scans the retained events, which the trim_feed upkeep job
-- keeps to what some consumer has not yet passed (feed_events_retained in settle.metrics).

set local role settle_owner;

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
  'The retained settlement-feed events (one per move of an operation into completed or failed) with their feed position (position_xid/event_id), and per event the registered consumers whose lane has passed it (acked_by: acknowledged, or skipped by a reset) and those that still have to deliver it (pending_for). Events every consumer has passed are removed by settle.trim_feed. A lookup by tenant and key scans the retained events (the feed is indexed by position only).';

grant select on settle.feed_events to settle_readonly, settle_admin;
grant execute on function settle_private._feed_in_lane(integer, text, integer, integer, text[]) to settle_readonly, settle_admin;

reset role;
