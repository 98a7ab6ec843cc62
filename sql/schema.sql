-- sql/schema.sql: the whole current pg-settle schema (schemas settle and settle_private:
-- types, tables, indexes, functions, triggers, policies, views, comments and grants), as
-- pg_dump --schema-only prints it after sql/migrations/*.sql are applied to a fresh database.
-- GENERATED, do not edit: change sql/migrations, then run `npm run schema`.
-- test/db/schema-dump.test.ts fails when this file and the migrations disagree.
-- Roles (settle_owner, settle_app, settle_readonly, settle_admin) are cluster-wide and created
-- by 00001_create_roles_and_schemas.sql; pg_dump of one database does not include them.

--
-- PostgreSQL database dump
--

--
-- Name: settle; Type: SCHEMA; Schema: -; Owner: settle_owner
--

CREATE SCHEMA settle;

ALTER SCHEMA settle OWNER TO settle_owner;

--
-- Name: SCHEMA settle; Type: COMMENT; Schema: -; Owner: settle_owner
--

COMMENT ON SCHEMA settle IS 'pg-settle public API: functions and read-only views. Tables live in settle_private and are not an interface.';

--
-- Name: settle_private; Type: SCHEMA; Schema: -; Owner: settle_owner
--

CREATE SCHEMA settle_private;

ALTER SCHEMA settle_private OWNER TO settle_owner;

--
-- Name: SCHEMA settle_private; Type: COMMENT; Schema: -; Owner: settle_owner
--

COMMENT ON SCHEMA settle_private IS 'pg-settle private tables and helpers. Not an interface: use the functions in schema settle.';

--
-- Name: status; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.status AS ENUM (
    'pending',
    'running',
    'unknown',
    'conflict',
    'failed',
    'completed'
);

ALTER TYPE settle.status OWNER TO settle_owner;

--
-- Name: TYPE status; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.status IS 'Canonical operation status, declared in lattice order (the order matters): pending/running (rank 1) < unknown (2) < conflict (3) < failed (4) < completed (5). See settle.status_rank.';

--
-- Name: claim_many_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.claim_many_result AS (
	ordinal integer,
	key text,
	outcome text,
	status settle.status,
	attempt integer,
	lease_token uuid,
	lease_expires_at timestamp with time zone,
	retry_after_ms integer,
	fingerprint text,
	result jsonb,
	settled_attempt integer,
	error jsonb,
	dead_lettered boolean,
	conflict_on text[],
	reason text,
	dead_letter_reason text
);

ALTER TYPE settle.claim_many_result OWNER TO settle_owner;

--
-- Name: TYPE claim_many_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.claim_many_result IS 'One element of settle.claim_many: its ordinal (1-based position in keys) and key, then exactly the columns settle.claim answers for that key (settle.claim_result).';

--
-- Name: claim_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.claim_result AS (
	outcome text,
	status settle.status,
	attempt integer,
	lease_token uuid,
	lease_expires_at timestamp with time zone,
	retry_after_ms integer,
	fingerprint text,
	result jsonb,
	settled_attempt integer,
	error jsonb,
	dead_lettered boolean,
	conflict_on text[],
	reason text,
	dead_letter_reason text
);

ALTER TYPE settle.claim_result OWNER TO settle_owner;

--
-- Name: TYPE claim_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.claim_result IS 'Answer of settle.claim. outcome: acquired | in_progress | replay | failed | unknown | in_doubt | conflict | refused. Columns that do not apply to an outcome are NULL; a conflict discloses only conflict_on, a refusal only its reason (binding_revoked). dead_letter_reason: attempts_exhausted (failed) or needs_reconciliation (unknown).';

--
-- Name: complete_many_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.complete_many_result AS (
	ordinal integer,
	key text,
	outcome text,
	reason text,
	status settle.status,
	attempt integer,
	settled_attempt integer,
	result jsonb,
	error jsonb,
	conflict_on text[],
	dead_lettered boolean,
	dead_letter_reason text
);

ALTER TYPE settle.complete_many_result OWNER TO settle_owner;

--
-- Name: TYPE complete_many_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.complete_many_result IS 'One element of settle.complete_many: its ordinal (1-based position in keys) and key, then exactly the columns settle.complete answers for that key (settle.observation_result).';

--
-- Name: expire_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.expire_result AS (
	expired integer,
	dead_lettered integer
);

ALTER TYPE settle.expire_result OWNER TO settle_owner;

--
-- Name: TYPE expire_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.expire_result IS 'Answer of settle.expire_leases: leases expired and operations dead-lettered in this call.';

--
-- Name: feed_consumer; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.feed_consumer AS (
	consumer text,
	tenants text[],
	lanes integer,
	registered_at timestamp with time zone,
	registered_by text,
	created boolean
);

ALTER TYPE settle.feed_consumer OWNER TO settle_owner;

--
-- Name: TYPE feed_consumer; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.feed_consumer IS 'Answer of settle.register_consumer: the consumer as registered; created is false when it already existed with the same definition.';

--
-- Name: feed_event; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.feed_event AS (
	consumer text,
	lane integer,
	lease_token uuid,
	lease_expires_at timestamp with time zone,
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
	occurred_at timestamp with time zone
);

ALTER TYPE settle.feed_event OWNER TO settle_owner;

--
-- Name: TYPE feed_event; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.feed_event IS 'One event of a batch from settle.read_feed: the lane and lease it was read under (pass lane, lease_token, position_xid and event_id of the last event handled to settle.ack_feed), the delivery id event_id (stable: a re-delivery carries the same id; use it as the downstream idempotency key), the operation (tenant, key), its final status and the status it moved from (unknown or conflict: a reconciliation was resolved), the attempt (the settled attempt for completed, the attempt epoch for failed), result or error, dead_letter_reason, redrive_count and when the outcome was written.';

--
-- Name: feed_reset; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.feed_reset AS (
	consumer text,
	lane integer,
	position_before text,
	position_after text,
	events_to_deliver bigint,
	applied boolean
);

ALTER TYPE settle.feed_reset OWNER TO settle_owner;

--
-- Name: TYPE feed_reset; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.feed_reset IS 'One lane of settle.reset_consumer: positions before and after (position_xid/event_id), how many retained events the lane will deliver from the new position, and whether the reset was applied (false for a dry run).';

--
-- Name: get_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.get_result AS (
	outcome text,
	reason text,
	status settle.status,
	attempt integer,
	settled_attempt integer,
	result jsonb,
	error jsonb,
	dead_lettered boolean,
	in_flight boolean,
	conflict_on text[],
	created_at timestamp with time zone
);

ALTER TYPE settle.get_result OWNER TO settle_owner;

--
-- Name: TYPE get_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.get_result IS 'Answer of settle.get. outcome: found | not_found | conflict | refused. Only found discloses state (status, attempt, settled_attempt, result when completed, error, dead_lettered, in_flight, created_at); a conflict discloses only conflict_on; refused only its reason (binding_revoked).';

--
-- Name: heartbeat_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.heartbeat_result AS (
	outcome text,
	reason text,
	status settle.status,
	lease_expires_at timestamp with time zone
);

ALTER TYPE settle.heartbeat_result OWNER TO settle_owner;

--
-- Name: TYPE heartbeat_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.heartbeat_result IS 'Answer of settle.heartbeat. outcome: extended | fenced (reason: invalid_token | superseded | settled | lease_released).';

--
-- Name: observation_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.observation_result AS (
	outcome text,
	reason text,
	status settle.status,
	attempt integer,
	settled_attempt integer,
	result jsonb,
	error jsonb,
	conflict_on text[],
	dead_lettered boolean,
	dead_letter_reason text
);

ALTER TYPE settle.observation_result OWNER TO settle_owner;

--
-- Name: TYPE observation_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.observation_result IS 'Answer of settle.complete / fail / report_unknown. outcome: settled | recorded | duplicate | already_settled | fenced | conflict. status/result/error/dead_lettered/dead_letter_reason are the canonical state after the merge, disclosed only to the holder of a valid attempt token whose lock matched (NULL for conflict and invalid_token).';

--
-- Name: reconciliation_lease; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.reconciliation_lease AS (
	tenant text,
	key text,
	status settle.status,
	attempt integer,
	fingerprint text,
	request jsonb,
	principal text,
	scopes text[],
	error jsonb,
	dead_letter_reason text,
	dead_lettered_at timestamp with time zone,
	created_at timestamp with time zone,
	lease_token uuid,
	lease_expires_at timestamp with time zone,
	checks integer
);

ALTER TYPE settle.reconciliation_lease OWNER TO settle_owner;

--
-- Name: TYPE reconciliation_lease; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.reconciliation_lease IS 'A row of settle.lease_reconciliation: an operation needing reconciliation (what the downstream lookup needs: request, fingerprint, principal, error), the reconciler lease on it (lease_token, lease_expires_at) and how many times it was leased (checks).';

--
-- Name: resolve_result; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.resolve_result AS (
	outcome text,
	reason text,
	status settle.status,
	status_before settle.status,
	attempt integer,
	settled_attempt integer,
	result jsonb,
	error jsonb
);

ALTER TYPE settle.resolve_result OWNER TO settle_owner;

--
-- Name: TYPE resolve_result; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.resolve_result IS 'Answer of settle.resolve. outcome: resolved (status_before -> status, the resolution is recorded) | already_final (the operation was completed or failed already; nothing changed; reason matches: the final outcome is the one asserted, or differs). status, attempt, settled_attempt, result and error are the canonical state after the call.';

--
-- Name: upkeep_run; Type: TYPE; Schema: settle; Owner: settle_owner
--

CREATE TYPE settle.upkeep_run AS (
	job text,
	outcome text,
	detail jsonb
);

ALTER TYPE settle.upkeep_run OWNER TO settle_owner;

--
-- Name: TYPE upkeep_run; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON TYPE settle.upkeep_run IS 'A row of settle.run_upkeep: job; outcome ran | failed (detail.error) | not_due | busy (another caller is running it); detail (expire_leases: expired, dead_lettered; dead_letter_in_doubt: dead_lettered, in_doubt_after; purge: purged, retention; trim_feed: trimmed).';

--
-- Name: audit_event; Type: DOMAIN; Schema: settle_private; Owner: settle_owner
--

CREATE DOMAIN settle_private.audit_event AS text
	CONSTRAINT event_is_known CHECK ((VALUE = ANY (ARRAY['claim'::text, 'heartbeat'::text, 'complete'::text, 'fail'::text, 'report_unknown'::text, 'expire'::text, 'redrive'::text, 'purge'::text, 'get'::text, 'revoke'::text, 'resolve'::text])));

ALTER DOMAIN settle_private.audit_event OWNER TO settle_owner;

--
-- Name: ack_feed(text, integer, uuid, xid8, bigint); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint) OWNER TO settle_owner;

--
-- Name: FUNCTION ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint) IS 'Acknowledge a consumer''s events up to and including one event of the leased batch (all of it, or a prefix), moving the lane''s position.
Parameters: consumer; lane and lease_token as read_feed returned them; position_xid and event_id of the last event handled (both NULL: acknowledge nothing, release the lease: the batch is delivered again).
Outcomes: true when the lease is released (the whole batch is acknowledged, or nothing was), false when part of the batch is still leased.
SQLSTATEs: SE008 (missing arguments, a position outside the leased batch), SE040 (no such consumer, or one beyond the tenants of a tenant-bound login), SE042 (the lease is no longer held: the lane was taken over after the lease lapsed, or the consumer was reset or dropped and registered again).
Locking: the lane row (FOR UPDATE). Idempotency: an ack of a released lease is SE042; call it in the transaction that applied the events for exactly-once processing.';

--
-- Name: await_feed(text, integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.await_feed(consumer text, seconds integer DEFAULT 5) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.await_feed(consumer text, seconds integer) OWNER TO settle_owner;

--
-- Name: FUNCTION await_feed(consumer text, seconds integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.await_feed(consumer text, seconds integer) IS 'Register the calling backend as waiting for the feed: for the next `seconds`, every final outcome sends NOTIFY settle_feed (LISTEN settle_feed on this connection first). A wake-up hint only: read_feed decides what is delivered.
Parameters: consumer; seconds (1-60, default 5).
Outcomes: true.
SQLSTATEs: SE008 (seconds), SE040 (no such consumer, or one beyond the tenants of a tenant-bound login).
Locking: none beyond its own waiter row. Idempotency: a repeat extends the wait.';

--
-- Name: claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.claim(tenant text, key text, request jsonb, principal text, scopes text[] DEFAULT '{}'::text[], binding_generation bigint DEFAULT 0, lease interval DEFAULT '00:00:30'::interval, worker text DEFAULT NULL::text, max_attempts integer DEFAULT 5, rerun_after_unknown boolean DEFAULT true) RETURNS settle.claim_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_writes integer;
  v_now timestamptz := clock_timestamp();
  v_decided timestamptz;
  v_fp text;
  v_token uuid;
  v_op settle_private.operations;
  v_before settle.status;
  v_diff text[];
  v_locked boolean;
  v_fresh boolean;
  v_open boolean;
  v_detail jsonb;
  v_audit_attempt integer;
  v_res settle.claim_result;
  v_floor bigint;
  v_seq bigint;
  v_audit_id bigint;
  -- The first statement's row: the access verdict of the call (00007), the operation row (all
  -- NULL: no such key), the answer to a replay and whether a new key may be inserted. A record,
  -- not a declared composite type: Citus propagates functions to the workers but not a type
  -- that depends on a distributed table's row type.
  v_seen record;
begin
  -- One statement reads the access verdict (00007: the login role's tenant binding, then the
  -- revocation floor of the binding) and the operation row; nothing read is used or disclosed
  -- before the verdict is checked. Most claims of an existing key (replays, retries,
  -- duplicates) are decided on this plain read; only a missing key tries the insert.
  -- The two common answers take as few PL/pgSQL expressions as possible (each is set up again in
  -- every transaction, docs/performance.md): a missing key with access granted is inserted at
  -- once, a replay is answered from this read.
  select s.verdict, s.op,
         s.op is null and s.verdict >= 0 and claim.binding_generation >= s.verdict as new_key
    into v_seen
    from (select case when exists (select 1 from settle_private.tenant_bindings b   -- settle_private._access (00007)
                                    where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (claim.tenant = any (b.tenants))) then -1
                      else coalesce((select f.below_generation from settle_private.binding_floors f
                                      where f.tenant = claim.tenant and f.principal = claim.principal), 0) end as verdict,
                 (select o from settle_private.operations o where o.tenant = claim.tenant and o.key = claim.key) as op
          offset 0) s;
  -- The reservation exactly as stored (access granted, the generation not revoked, the request
  -- and binding presented equal, scopes in their stored, normalized form) on a completed
  -- operation (replay) or one whose lease is live (in_progress): the input rules judged each of
  -- these values at the first claim, so they are not judged again; only the arguments these
  -- answers do not compare (lease, worker, budget, rerun_after_unknown) are. The two read-only
  -- answers a retry storm gets are then decided without the rules' expression, which is set up
  -- again in every transaction (docs/performance.md), as the loop below would decide them; any
  -- other call is judged by the rules first, as one that does not meet this test (unsorted
  -- scopes, say).
  if v_seen.new_key is not true then
    v_op := v_seen.op;
    if (v_op.status = 'completed' or (v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at > v_now))
       and v_seen.verdict >= 0 and claim.binding_generation >= v_seen.verdict
       and v_op.request = claim.request and v_op.principal = claim.principal and v_op.scopes = claim.scopes
       and v_op.binding_generation = claim.binding_generation and settle_private._lease_ok(claim.lease)
       and (claim.worker is null or settle_private._name_ascii_ok(claim.worker, settle_private._limit('worker_bytes')))
       and claim.max_attempts between 1 and settle_private._limit('max_attempts')
       and claim.rerun_after_unknown is not null then
      if v_op.status = 'completed' then
        return row('replay', v_op.status, v_op.attempt, null, null, null, v_op.fingerprint, v_op.result,
                   v_op.settled_attempt, null, null, null, null, null)::settle.claim_result;
      end if;
      return row('in_progress', v_op.status, v_op.attempt, null, v_op.lease_expires_at,
                 greatest(1, ceil(extract(epoch from (v_op.lease_expires_at - v_now)) * 1000))::integer,
                 v_op.fingerprint, null, null, null, null, null, null, null)::settle.claim_result;
    end if;
  end if;

  -- The input rules: printable ASCII names and at most one scope pass the first test, of
  -- built-in functions only; any other input is judged by the full rules, set up only then
  -- (docs/performance.md).
  if (settle_private._name_ascii_ok(claim.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ascii_ok(claim.key, settle_private._limit('key_bytes'))
      and settle_private._binding_ascii_ok(claim.principal, claim.scopes, claim.binding_generation)
      and settle_private._json_ok(claim.request, settle_private._limit('request_bytes'))
      and settle_private._lease_ok(claim.lease)
      and (claim.worker is null or settle_private._name_ascii_ok(claim.worker, settle_private._limit('worker_bytes')))
      and claim.max_attempts between 1 and settle_private._limit('max_attempts')
      and claim.rerun_after_unknown is not null) is not true then
    if (settle_private._name_ok(claim.tenant, settle_private._limit('tenant_bytes'))
        and settle_private._name_ok(claim.key, settle_private._limit('key_bytes'))
        and settle_private._binding_ok(claim.principal, claim.scopes, claim.binding_generation)
        and settle_private._json_ok(claim.request, settle_private._limit('request_bytes'))
        and settle_private._lease_ok(claim.lease)
        and (claim.worker is null or settle_private._name_ok(claim.worker, settle_private._limit('worker_bytes')))
        and claim.max_attempts between 1 and settle_private._limit('max_attempts')
        and claim.rerun_after_unknown is not null) is not true then
      perform settle_private._check_claim_args(claim.tenant, claim.key, claim.request, claim.principal,
        claim.scopes, claim.binding_generation, claim.lease, claim.worker, claim.max_attempts);
      perform settle_private._raise('SE008', 'rerun_after_unknown must not be NULL',
        jsonb_build_object('field', 'rerun_after_unknown'), 'Pass true (open a new attempt) or false (answer in_doubt).');
    end if;
  end if;

  if v_seen.new_key then
    -- First claim: the reservation lock and attempt 1, one row: attempt 1's token (its lease
    -- token) and the log of this claim (settle.audit_log shows it as claim:acquired; no audit
    -- row), its place in the key's history counted as settle_private._next_seq counts it (00006:
    -- a key without operation may have audit rows, a purge tombstone or refused calls), read
    -- here rather than by the first read, whose every sub-plan each replay sets up
    -- (docs/performance.md). Two sessions racing on a new key: the loser waits here for the
    -- winner to commit, inserts nothing, then joins below.
    v_token := gen_random_uuid();
    select coalesce(max(l.seq), 0) + 1 into v_seq from settle_private.audit_log l
     where l.tenant = claim.tenant and l.key = claim.key;
    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    values
      (claim.tenant, claim.key, settle_private._fingerprint(claim.request), claim.request, claim.principal,
       settle_private._normalize_scopes(claim.scopes), claim.binding_generation, claim.max_attempts, v_now,
       1, v_token, claim.worker, v_now, session_user, v_seq, nextval('settle_private.audit_log_audit_id_seq'), 'running',
       'running', v_token, settle_private._expiry(v_now, claim.lease), v_now)
    on conflict on constraint operations_pkey do nothing
    returning o.tenant, o.status, o.lease_expires_at, o.fingerprint
      into v_op.tenant, v_op.status, v_op.lease_expires_at, v_op.fingerprint;
    -- Only the columns the answer and the paths below read come back (RETURNING * builds and
    -- assigns every column: -1.7% instructions per new key, docs/performance.md); the waited
    -- path below reads the whole row back from its UPDATE ... RETURNING *.
    -- The insert waits only behind another session's uncommitted insert of the same key. A
    -- claim that did not wait (the common case, within the 5 ms allowed for scheduling) is
    -- decided.
    if v_op.tenant is not null and clock_timestamp() <= v_now + interval '5 milliseconds' then
      return row('acquired', v_op.status, 1, v_token, v_op.lease_expires_at, null, v_op.fingerprint,
                 null, null, null, null, null, null, null)::settle.claim_result;
    end if;
  else
    if v_op.status = 'completed' and v_seen.verdict >= 0 and claim.binding_generation >= v_seen.verdict
       and v_op.request = claim.request and v_op.principal = claim.principal
       and v_op.scopes = settle_private._normalize_scopes(claim.scopes)
       and v_op.binding_generation = claim.binding_generation then
      -- A replay (access granted, the generation not revoked, the operation completed and the
      -- request and binding presented equal to the reservation's, scopes once normalized): the
      -- answer the loop below gives, read-only (no audit row, no WAL, no commit flush).
      return row('replay', v_op.status, v_op.attempt, null, null, null, v_op.fingerprint, v_op.result,
                 v_op.settled_attempt, null, null, null, null, null)::settle.claim_result;
    end if;
  end if;

  v_floor := v_seen.verdict;
  if v_floor < 0 then
    perform settle_private._refuse_tenant(claim.tenant, claim.key, 'claim');
  end if;
  if claim.binding_generation < v_floor then
    return settle_private._claim_refused(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
      claim.binding_generation, v_floor, v_now, claim.worker);
  end if;

  if v_seen.new_key then
    v_fresh := false;
    v_fp := settle_private._fingerprint(claim.request);
    if v_op.tenant is not null then
      -- The insert above waited behind another session's uncommitted insert of the same key
      -- that then rolled back. The decision is this moment, not the call's start:
      -- access is judged again with what committed meanwhile (a revocation converts the
      -- new operation before anything runs), and the lease is measured from now, so no answer
      -- carries a lease that already lapsed.
      v_decided := clock_timestamp();
      if v_decided > v_now + interval '5 milliseconds' then
        v_floor := settle_private._access(claim.tenant, claim.principal);
        if v_floor < 0 then
          perform settle_private._refuse_tenant(claim.tenant, claim.key, 'claim');
        end if;
        v_now := v_decided;
        update settle_private.operations o
           set lease_expires_at = settle_private._expiry(v_now, claim.lease), updated_at = v_now
         where o.tenant = claim.tenant and o.key = claim.key
        returning * into v_op;
      end if;
      if claim.binding_generation < v_floor then
        -- Revoked while this claim waited: nothing may run under it.
        v_op := settle_private._revoke_operation(v_op, v_floor, v_now, claim.worker);
        return settle_private._claim_refused(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
          claim.binding_generation, v_floor, v_now, claim.worker);
      end if;
      return row('acquired', v_op.status, 1, v_token, v_op.lease_expires_at, null, v_fp,
                 null, null, null, null, null, null, null)::settle.claim_result;
    end if;
    -- Another session's first claim reserved the key; this insert may have waited for it to
    -- commit. Decide with what committed meanwhile: the time its lease is judged
    -- by, the tenant binding and the revocation floor.
    v_decided := clock_timestamp();
    if v_decided > v_now + interval '5 milliseconds' then
      v_now := v_decided;
      v_floor := settle_private._access(claim.tenant, claim.principal);
      if v_floor < 0 then
        perform settle_private._refuse_tenant(claim.tenant, claim.key, 'claim');
      end if;
      if claim.binding_generation < v_floor then
        return settle_private._claim_refused(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
          claim.binding_generation, v_floor, v_now, claim.worker);
      end if;
    end if;
  else
    v_fresh := true;
    -- A request jsonb-equal to the stored one has the stored fingerprint (jsonb equality
    -- compares numbers by value, as the canonical form does: 10.50 = 10.5), so a claim of an
    -- existing key with the same request skips the hash; another request is hashed.
    if v_op.request = claim.request then
      v_fp := v_op.fingerprint;
    else
      v_fp := settle_private._fingerprint(claim.request);
    end if;
  end if;

  v_locked := false;
  -- Answers that change nothing (conflict, replay, in_progress, failed, unknown, in_doubt) are decided on a
  -- plain read: the lock is immutable, completed is absorbing, a live lease is live.
  -- Only a takeover or a new attempt locks the row, and then decides again.
  loop
    if v_locked then
      select * into v_op from settle_private.operations o
       where o.tenant = claim.tenant and o.key = claim.key
       for update;
      -- Locked: decide again with what committed while this call waited: the
      -- time a lease is measured from (and whether the current one lapsed), the tenant binding
      -- and the revocation floor.
      v_now := clock_timestamp();
      v_floor := settle_private._access(claim.tenant, claim.principal);
      if v_floor < 0 then
        perform settle_private._refuse_tenant(claim.tenant, claim.key, 'claim');
      end if;
      if claim.binding_generation < v_floor then
        return settle_private._claim_refused(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
          claim.binding_generation, v_floor, v_now, claim.worker);
      end if;
    elsif not v_fresh then
      select * into v_op from settle_private.operations o
       where o.tenant = claim.tenant and o.key = claim.key;
    end if;
    v_fresh := false;
    if v_op.tenant is null then
      -- Purged by settle.purge since our insert: the key is free again.
      return settle.claim(claim.tenant, claim.key, claim.request, claim.principal, claim.scopes,
        claim.binding_generation, claim.lease, claim.worker, claim.max_attempts, claim.rerun_after_unknown);
    end if;
    v_before := v_op.status;

    v_diff := settle_private._lock_diff(v_op, v_fp, claim.principal, claim.scopes, claim.binding_generation);
    if cardinality(v_diff) > 0 then
      if v_op.principal = claim.principal and v_op.binding_generation < v_floor and v_op.status <> 'completed' then
        -- The reservation's own generation is revoked: convert it at this touch (00007).
        perform settle_private._revoke_touch(claim.tenant, claim.key, claim.principal, v_floor, v_now, claim.worker);
      end if;
      -- Only the holder of the same binding learns which part differs; the audit
      -- row keeps the full list and what was presented, so an enumeration is visible.
      v_res := row('conflict', null, null, null, null, null, null, null, null, null, null,
                   settle_private._conflict_on(v_diff), null, null);
      v_detail := jsonb_build_object('conflict_on', v_diff, 'presented', settle_private._presented(
        v_fp, claim.principal, claim.scopes, claim.binding_generation, null, null));
      exit;
    end if;

    -- Read-only answers (replay, in_progress) change nothing and write nothing: no audit row,
    -- so no WAL and no commit flush (docs/protocol.md, "Which table proves what").
    if v_op.status = 'completed' then
      return row('replay', v_op.status, v_op.attempt, null, null, null, v_fp, v_op.result,
                 v_op.settled_attempt, null, null, null, null, null)::settle.claim_result;
    end if;

    if v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at > v_now then
      return row('in_progress', v_op.status, v_op.attempt, null, v_op.lease_expires_at,
                 greatest(1, ceil(extract(epoch from (v_op.lease_expires_at - v_now)) * 1000))::integer,
                 v_fp, null, null, null, null, null, null, null)::settle.claim_result;
    end if;

    -- An attempt reported unknown (status unknown: only report_unknown sets it) and no lease is
    -- live: a caller that cannot tell whether that attempt took effect asked not to run another
    -- (rerun_after_unknown => false). Answered from this read, like failed: nothing is opened,
    -- locked or changed; the answer is audited. A dead letter keeps its own answer (unknown,
    -- below); a lapsed lease of a crashed attempt on a pending or running operation is still
    -- taken over (nothing reported that it may have taken effect).
    if not claim.rerun_after_unknown and v_op.status = 'unknown' and v_op.dead_lettered_at is null then
      v_res := row('in_doubt', v_op.status, v_op.attempt, null, null, null, v_fp, null, null, null,
                   false, null, null, null);
      v_audit_attempt := v_op.attempt;
      exit;
    end if;

    -- Open: neither failed nor dead-lettered, so a new attempt may be opened.
    v_open := v_op.status <> 'failed' and v_op.dead_lettered_at is null;
    if v_open and not v_locked then
      v_locked := true;
      continue;
    end if;

    -- Locked from here on. A lapsed lease is taken over without waiting for
    -- settle.expire_leases; a spent attempt budget dead-letters the operation.
    if v_open and (v_op.lease_token is not null or v_op.attempt >= v_op.max_attempts) then
      v_op := settle_private._expire(v_op, v_now, claim.worker);
      -- The expiry is a row of its own in the history (expire:expired): this claim's row starts
      -- where it left the status, so every row's status_before is the previous move's end.
      v_before := v_op.status;
    end if;

    if v_op.status = 'failed' then
      v_res := row('failed', v_op.status, v_op.attempt, null, null, null, v_fp, null, null, v_op.error,
                   v_op.dead_lettered_at is not null, null, null, v_op.dead_letter_reason);
      v_audit_attempt := v_op.attempt;
      exit;
    end if;

    -- The budget is spent and an attempt may have taken effect (it reported unknown,
    -- conflicted, or its lease lapsed without an observation): timeout means unknown. The
    -- effect must not run again; the operation waits for a matching success or an operator.
    if v_op.dead_lettered_at is not null then
      v_res := row('unknown', v_op.status, v_op.attempt, null, null, null, v_fp, null, null, null,
                   true, null, null, v_op.dead_letter_reason);
      v_audit_attempt := v_op.attempt;
      exit;
    end if;

    -- A new attempt epoch on the operation row, its claim logged there (claim:acquired in
    -- settle.audit_log), once the record of the attempt it supersedes is kept (00006).
    -- (The token, place and audit id are drawn first: Citus refuses a volatile function in an
    -- UPDATE of a distributed table.)
    v_token := gen_random_uuid();
    v_writes := settle_private._record_attempt(claim.tenant, claim.key, v_op.attempt);
    v_seq := settle_private._next_seq(claim.tenant, claim.key);
    v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
    update settle_private.operations o
       set attempt = v_op.attempt + 1, attempt_token = v_token, worker = claim.worker, claimed_at = v_now,
           claimed_by = session_user, claim_seq = v_seq, claim_audit_id = v_audit_id, claim_status_before = v_before,
           claim_status_after = case when v_op.status = 'pending' then 'running'::settle.status else v_op.status end,
           status = case when v_op.status = 'pending' then 'running'::settle.status else v_op.status end,
           lease_token = v_token, lease_expires_at = settle_private._expiry(v_now, claim.lease), updated_at = v_now
     where o.tenant = claim.tenant and o.key = claim.key
    returning * into v_op;
    v_res := row('acquired', v_op.status, v_op.attempt, v_token, v_op.lease_expires_at, null, v_fp,
                 null, null, null, null, null, null, null);
    exit;
  end loop;

  if v_res.outcome = 'acquired' then
    return v_res;
  end if;
  v_writes := v_writes + settle_private._audit(claim.tenant, claim.key, v_now, 'claim', v_res.outcome, v_audit_attempt, v_before,
    coalesce(v_op.status, v_before), claim.worker, v_detail);
  return v_res;
end
$$;

ALTER FUNCTION settle.claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) OWNER TO settle_owner;

--
-- Name: FUNCTION claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) IS 'Reserve an operation on first call, or join it: the claim phase of locked reservation.
Parameters: tenant (1-64 bytes), key (1-255 bytes; both NFC, no control characters, not blank), request jsonb (effect-defining fields, <= 64 KiB), principal (1-255 bytes), scopes text[] (<= 64, order and duplicates ignored), binding_generation bigint >= 0 (token epoch / session version), lease interval (1 s - 1 day, default 30 s), worker (optional, <= 128 bytes), max_attempts (1-1000, default 5; fixed at first claim), rerun_after_unknown boolean (default true: an operation whose attempt reported unknown opens a new attempt; false: it answers in_doubt and runs nothing, for a caller without a way to check the downstream).
Outcomes (exactly one row, also when sessions race on a new key): acquired (attempt N+1 opened: attempt, lease_token, lease_expires_at, fingerprint) | in_progress (a live lease is held: attempt, lease_expires_at, retry_after_ms) | replay (completed: result, settled_attempt) | failed (a committed failure: a final failure, or every attempt failed and the budget is spent; error, dead_lettered, dead_letter_reason attempts_exhausted when dead-lettered) | unknown (the attempt budget is spent and an attempt may have taken effect: dead_lettered, dead_letter_reason needs_reconciliation; nothing runs; a matching success of an earlier attempt still settles it) | in_doubt (only with rerun_after_unknown => false: an attempt reported unknown, no lease is live and the operation is not dead-lettered: status unknown, attempt, dead_lettered false; no attempt is opened, no lease taken, no row changed; a lapsed lease of a pending or running operation is still taken over) | conflict (request or binding differ from the reservation: conflict_on lists request/principal/scopes/binding_generation; nothing stored is disclosed, nothing executes) | refused (reason binding_revoked: the presented binding generation is below the floor of settle.revoke_binding; nothing runs or is disclosed; the refusal is audited with what was presented).
SQLSTATEs: SE001 tenant, SE002 key (no control, default-ignorable or bidirectional-control characters), SE003 binding, SE004 request, SE007 lease (an exact duration: no month or year part), SE008 worker/max_attempts/rerun_after_unknown NULL, SE013 tenant not granted to this login role.
Locking: answers that change nothing (conflict, replay, in_progress, failed, unknown, in_doubt) come from a plain read; a new key is inserted; a takeover or a new attempt locks the operation row (FOR UPDATE) and decides again. A lapsed lease is taken over in place.
Idempotency: retrying with the same request and binding joins the same operation. Every call leaves one row in settle.audit_log except the read-only answers replay and in_progress, which write nothing (no WAL, no commit flush); an acquiring claim is logged on the attempt it opens.';

--
-- Name: claim_many(text, text[], jsonb[], text, text[], bigint, interval, text, integer, boolean); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[] DEFAULT '{}'::text[], binding_generation bigint DEFAULT 0, lease interval DEFAULT '00:00:30'::interval, worker text DEFAULT NULL::text, max_attempts integer DEFAULT 5, rerun_after_unknown boolean DEFAULT true) RETURNS SETOF settle.claim_many_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_bad bigint;
  v_bytes bigint;
  v_item record;
  v_res settle.claim_result;
  v_out settle.claim_many_result[];
  v_floor bigint;
  v_started timestamptz;
  v_end timestamptz;
  v_expires timestamptz;
  v_acquired text[];
begin
  perform settle_private._check_batch_shape(array['keys', 'requests'],
    array[cardinality(claim_many.keys), cardinality(claim_many.requests)],
    array[array_ndims(claim_many.keys), array_ndims(claim_many.requests)],
    array[array_lower(claim_many.keys, 1), array_lower(claim_many.requests, 1)],
    array[(select min(u.i) from unnest(claim_many.keys) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(claim_many.requests) with ordinality u(v, i) where u.v is null)]);
  -- The arguments every key shares, then every element, by the single-key rules (their fast
  -- predicates first, as settle.claim's): nothing is decided before the whole batch passed.
  if (settle_private._name_ok(claim_many.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._binding_ok(claim_many.principal, claim_many.scopes, claim_many.binding_generation)
      and settle_private._lease_ok(claim_many.lease)
      and (claim_many.worker is null or settle_private._name_ok(claim_many.worker, settle_private._limit('worker_bytes')))
      and claim_many.max_attempts between 1 and settle_private._limit('max_attempts')
      and claim_many.rerun_after_unknown is not null) is not true then
    perform settle_private._check_claim_args(claim_many.tenant, 'key', '{}', claim_many.principal, claim_many.scopes,
      claim_many.binding_generation, claim_many.lease, claim_many.worker, claim_many.max_attempts);
    perform settle_private._raise('SE008', 'rerun_after_unknown must not be NULL',
      jsonb_build_object('field', 'rerun_after_unknown'), 'Pass true (open a new attempt) or false (answer in_doubt).');
  end if;
  -- Each request is measured once (settle_private._json_bytes), for its own limit and the batch's.
  select min(u.i) filter (where (settle_private._name_ok(u.k, settle_private._limit('key_bytes'))
                                 and u.n <= settle_private._limit('request_bytes')) is not true),
         sum(u.n)
    into v_bad, v_bytes
    from (select x.k, x.i, settle_private._json_bytes(x.r, settle_private._limit('request_bytes')) as n
            from unnest(claim_many.keys, claim_many.requests) with ordinality x(k, r, i)) u;
  if v_bad is not null then
    perform settle_private._check_batch_element('claim', v_bad, claim_many.tenant, claim_many.keys[v_bad],
      claim_many.requests[v_bad], claim_many.principal, claim_many.scopes, claim_many.binding_generation,
      claim_many.lease, claim_many.worker, claim_many.max_attempts, null, null, null, null);
  end if;
  perform settle_private._check_batch_bytes('requests', v_bytes);

  -- A batch of new keys (the common case) is claimed set-based when nothing can make it differ
  -- from its single claims: access granted and the generation not revoked, every key distinct and
  -- without an operation. A key inserted meanwhile by another session, or a wait, sends the batch
  -- back to the key-by-key path below (settle_private._claim_new_keys).
  v_floor := settle_private._access(claim_many.tenant, claim_many.principal);
  if v_floor >= 0 and claim_many.binding_generation >= v_floor and settle_private._set_based_batches()
     and (select count(distinct u.k) from unnest(claim_many.keys) u(k)) = cardinality(claim_many.keys)
     and not exists (select 1 from unnest(claim_many.keys) u(k)
                      cross join lateral (select 1 from settle_private.operations o
                                           where o.tenant = claim_many.tenant and o.key = u.k limit 1) x) then
    begin
      return query select * from settle_private._claim_new_keys(claim_many.tenant, claim_many.keys, claim_many.requests,
        claim_many.principal, claim_many.scopes, claim_many.binding_generation, claim_many.lease, claim_many.worker,
        claim_many.max_attempts);
      return;
    exception when sqlstate 'SE099' then
      -- Rolled back to the block's start: nothing of the set-based attempt is left, no lock held.
      null;
    end;
  end if;

  -- One key at a time, in the fixed order (see the top of this file): each by settle.claim. The
  -- batch's instant is the end of its last wait (settle_private._keyed_instant): access changed
  -- since the pass began undoes the pass (the block's subtransaction) and decides every key again;
  -- a pass longer than a tenth of the lease measures every lease it acquired again from its end.
  loop
    v_floor := settle_private._access(claim_many.tenant, claim_many.principal);
    v_started := clock_timestamp();
    begin
      v_out := '{}'::settle.claim_many_result[];
      for v_item in
        select u.k, u.r, u.i from unnest(claim_many.keys, claim_many.requests) with ordinality u(k, r, i)
         order by u.k collate "C", u.i
      loop
        v_res := settle.claim(claim_many.tenant, v_item.k, v_item.r, claim_many.principal, claim_many.scopes,
          claim_many.binding_generation, claim_many.lease, claim_many.worker, claim_many.max_attempts,
          claim_many.rerun_after_unknown);
        v_out := v_out || row(v_item.i, v_item.k, v_res.outcome, v_res.status, v_res.attempt, v_res.lease_token,
          v_res.lease_expires_at, v_res.retry_after_ms, v_res.fingerprint, v_res.result, v_res.settled_attempt,
          v_res.error, v_res.dead_lettered, v_res.conflict_on, v_res.reason, v_res.dead_letter_reason)::settle.claim_many_result;
      end loop;
      v_end := settle_private._keyed_instant(claim_many.tenant, claim_many.principal, claim_many.binding_generation,
        v_floor);
      exit;
    exception when sqlstate 'SE098' then
      -- Rolled back to the block's start: every key is decided again, at a later instant.
      null;
    end;
  end loop;
  if v_end > v_started + claim_many.lease / 10 then
    -- Every lease the batch acquired, measured again from its instant, and so is what its answers
    -- say of them: a key listed again after it was acquired answers in_progress with that lease.
    v_expires := settle_private._expiry(v_end, claim_many.lease);
    select array_agg(x.key) into v_acquired from unnest(v_out) x where x.outcome = 'acquired';
    update settle_private.operations o
       set lease_expires_at = v_expires, updated_at = v_end
      from unnest(v_out) x
     where x.outcome = 'acquired' and o.tenant = claim_many.tenant and o.key = x.key and o.lease_token = x.lease_token;
    return query select o.ordinal, o.key, o.outcome, o.status, o.attempt, o.lease_token,
                        case when o.key = any (v_acquired) and o.outcome in ('acquired', 'in_progress') then v_expires
                             else o.lease_expires_at end,
                        case when o.key = any (v_acquired) and o.outcome = 'in_progress'
                             then greatest(1, ceil(extract(epoch from (v_expires - v_end)) * 1000))::integer
                             else o.retry_after_ms end,
                        o.fingerprint, o.result, o.settled_attempt, o.error, o.dead_lettered,
                        o.conflict_on, o.reason, o.dead_letter_reason
                   from unnest(v_out) o order by o.ordinal;
    return;
  end if;
  return query select * from unnest(v_out) o order by o.ordinal;
end
$$;

ALTER FUNCTION settle.claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) OWNER TO settle_owner;

--
-- Name: FUNCTION claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) IS 'Claim many keys of one tenant in one call: settle.claim for every key, in one transaction, answered per key.
Parameters: tenant; keys text[] (1 to max_batch_keys = 1000 keys, each as settle.claim''s key; a key may repeat); requests jsonb[] (one request per key, same order); principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown: as settle.claim, shared by every key.
Outcomes: one row per element of keys, in their order: ordinal (1-based), key, and exactly what settle.claim answers for that key (acquired with its own attempt, lease_token, lease_expires_at and fingerprint | in_progress | replay | failed | unknown | in_doubt | conflict | refused). A key listed twice is claimed twice, in list order, as a second caller would be (the second answers in_progress when the first acquired).
SQLSTATEs: SE060 more than 1000 keys; SE061 no key; SE062 requests not one per key (a length, dimension or lower bound that differs); SE063 keys or requests NULL or with a NULL element (DETAIL: field, ordinal); SE064 the requests hold more than max_batch_bytes = 16 MiB of JSON text together; an element that breaks settle.claim''s rules raises settle.claim''s code (SE002 key, SE004 request) with its ordinal in DETAIL; SE001, SE003, SE007, SE008 for the shared arguments; SE013 tenant not granted to this login role. The whole batch is checked before any key is claimed: an error claims nothing.
Locking: as settle.claim for each key, the keys visited in one fixed order (key COLLATE "C", then ordinal), so concurrent batches over overlapping keys never deadlock. Every lock is held until the batch''s transaction ends.
Idempotency: as settle.claim per key: repeating the batch with the same requests and binding joins the same operations (replay once completed). Each key leaves what its single claim leaves in settle.audit_log.';

--
-- Name: complete(text, text, integer, uuid, text, text, text[], bigint, jsonb); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb) RETURNS settle.observation_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_seen record;
  v_now timestamptz;
  v_audit_id bigint;
  v_res settle.observation_result;
begin
  -- The common success, the current lease holder settling an operation nothing else touched,
  -- is decided here in two statements and a few expressions; every other case (bad input, a
  -- refused login, an invalid or stale token, a mismatched lock, a floor, an attempt that
  -- already reported, a completed operation) is left to the general merge
  -- settle_private._observe, which decides it from scratch (docs/performance.md:
  -- PL/pgSQL sets up every expression it evaluates again in each transaction, so the number of
  -- expressions and statements per call is the cost). The fingerprint's format is not tested
  -- here: this path settles only when the fingerprint equals the stored one, which every writer
  -- wrote in the v1 format (row rule fingerprint_is_versioned, 00004) and none can change
  -- (_050_guard_lock); a malformed one matches nothing and gets its SE004 from _observe.
  -- Only printable ASCII names and at most one scope take this path (built-in functions only,
  -- see _name_ascii_ok, 00003); any other input is judged by _observe's full rules.
  if (settle_private._name_ascii_ok(complete.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ascii_ok(complete.key, settle_private._limit('key_bytes'))
      and complete.attempt >= 1 and complete.lease_token is not null
      and settle_private._binding_ascii_ok(complete.principal, complete.scopes, complete.binding_generation)
      and settle_private._json_ok(complete.result, settle_private._limit('result_bytes'))) is true then
    -- As the general merge's first statement: access (the login's tenant binding) and the
    -- presented token are checked before the row lock, and the row is locked only when both
    -- pass; here it is locked only when, on its latest version, this attempt holds the lease
    -- (the operation's current attempt and lease token are the presented ones), the presented
    -- lock matches the reservation and nothing settled. An attempt that holds the lease has
    -- reported nothing (every report releases it) and has no record in settle_private.attempts
    -- yet: nothing else is read. One plain locking read: the access test refers to no row of
    -- operations, so it is evaluated once, before the scan, as the scan's gate (a refused login
    -- reads and locks nothing), without the CTE and lateral join that cost three plan nodes.
    select o.status, o.claim_seq into v_seen
      from settle_private.operations o
     where o.tenant = complete.tenant and o.key = complete.key
       and o.attempt = complete.attempt and o.lease_token = complete.lease_token and o.status <> 'completed'
       and o.fingerprint = complete.fingerprint and o.principal = complete.principal
       and o.scopes = settle_private._normalize_scopes(complete.scopes)
       and o.binding_generation = complete.binding_generation
       and case when exists (select 1 from settle_private.tenant_bindings r
                              where (r.role_oid = to_regrole(quote_ident(session_user::text))::oid or r.role_name = session_user::text)
                                and not (complete.tenant = any (r.tenants))) then -1
                else 0 end >= 0
       for update;
    if found then
      -- Locked. As in the general merge, the access verdict and the place of this settlement in
      -- the key's history (after its audit rows and the claim of its current attempt, the
      -- latest event logged on a row of the key) are read after the lock, with what committed
      -- while this call waited; the settlement and its log are written in the same statement,
      -- only if no floor applies.
      v_now := clock_timestamp();
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      with s as materialized (
        select case when exists (select 1 from settle_private.tenant_bindings b   -- settle_private._access (00007)
                                  where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (complete.tenant = any (b.tenants))) then -1
                    else coalesce((select f.below_generation from settle_private.binding_floors f
                                    where f.tenant = complete.tenant and f.principal = complete.principal), 0) end as verdict,
               coalesce(greatest(
                 (select l.seq from settle_private.audit_log l where l.tenant = complete.tenant and l.key = complete.key
                   order by l.seq desc limit 1),
                 v_seen.claim_seq), 0) + 1 as seq
      ), op as (
        update settle_private.operations o
           set status = 'completed', result = complete.result, settled_attempt = complete.attempt,
               settled_at = v_now, settled_seq = s.seq, settled_audit_id = v_audit_id,
               settled_status_before = v_seen.status, settled_reason = 'current_attempt', settled_by = session_user,
               lease_token = null, lease_expires_at = null, dead_lettered_at = null,
               dead_letter_reason = null, error = null, updated_at = v_now
          from s
         where o.tenant = complete.tenant and o.key = complete.key and s.verdict = 0
        returning o.status, o.attempt, o.settled_attempt, o.result
      )
      select 'settled'::text, 'current_attempt'::text, op.status, op.attempt, op.settled_attempt, op.result,
             null::jsonb, null::text[], false, null::text
        into v_res
        from op;
      if found then
        return v_res;
      end if;
    end if;
  end if;
  return settle_private._observe('complete', complete.tenant, complete.key, complete.attempt, complete.lease_token, complete.fingerprint,
    complete.principal, complete.scopes, complete.binding_generation, complete.result, null, null);
end
$$;

ALTER FUNCTION settle.complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb) OWNER TO settle_owner;

--
-- Name: FUNCTION complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb) IS 'Report that this attempt''s effect committed, with its result: the binding-gated, monotonic success merge.
Parameters: tenant, key, attempt, lease_token, fingerprint (all from the acquired claim), principal, scopes, binding_generation (the binding presented at claim), result jsonb (<= 1 MiB; immutable once settled).
Outcomes: settled (this success is the one settlement: status completed, result stored, reason current_attempt; superseded_attempt: a later attempt exists but nothing had settled, and this effect really happened; lease_released: this is the latest attempt, its lease was released (it reported unknown, or its lapsed lease was expired) and nothing had settled) | already_settled (reason late_success: the operation was already completed; this success is recorded on its attempt, the result is not replaced; reason attempt_already_observed: this attempt already reported another outcome) | duplicate (this attempt already reported this exact success) | conflict (this attempt''s own token, but fingerprint or binding differ: conflict_on; nothing disclosed; the canonical status moves to conflict if it was below it, the result is never touched; the attempt records conflict and loses its lease) | fenced (reason invalid_token: no such attempt or token; judged first, so a mismatched success with a token that is not the attempt''s changes nothing, no conflict; reason attempt_conflicted: this attempt presented a mismatched lock before and is fenced for good, whatever it presents now).
Canonical status, result and settled_attempt after the merge are returned except for conflict and invalid_token.
Also fenced with reason binding_revoked: the presented generation is below the floor of settle.revoke_binding; nothing merges, the presented result is kept in the audit log.
SQLSTATEs: SE001, SE002, SE003, SE004 (fingerprint format), SE005 (result), SE008; SE010 operation not found; SE013 tenant not granted to this login role.
Locking: the operation row (FOR UPDATE). Works inside the caller''s transaction: commit a same-database effect atomically with its settlement.
Idempotency: repeating the same call answers duplicate and changes nothing; every call leaves one row in settle.audit_log (a settling success: on its operation row).';

--
-- Name: complete_many(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[]); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) RETURNS SETOF settle.complete_many_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_bad bigint;
  v_bytes bigint;
  v_item record;
  v_res settle.observation_result;
  v_out settle.complete_many_result[];
  v_floor bigint;
begin
  perform settle_private._check_batch_shape(array['keys', 'attempts', 'lease_tokens', 'fingerprints', 'results'],
    array[cardinality(complete_many.keys), cardinality(complete_many.attempts), cardinality(complete_many.lease_tokens),
          cardinality(complete_many.fingerprints), cardinality(complete_many.results)],
    array[array_ndims(complete_many.keys), array_ndims(complete_many.attempts), array_ndims(complete_many.lease_tokens),
          array_ndims(complete_many.fingerprints), array_ndims(complete_many.results)],
    array[array_lower(complete_many.keys, 1), array_lower(complete_many.attempts, 1), array_lower(complete_many.lease_tokens, 1),
          array_lower(complete_many.fingerprints, 1), array_lower(complete_many.results, 1)],
    array[(select min(u.i) from unnest(complete_many.keys) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.attempts) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.lease_tokens) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.fingerprints) with ordinality u(v, i) where u.v is null),
          (select min(u.i) from unnest(complete_many.results) with ordinality u(v, i) where u.v is null)]);
  if (settle_private._name_ok(complete_many.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._binding_ok(complete_many.principal, complete_many.scopes, complete_many.binding_generation)) is not true then
    perform settle_private._check_operation_key(complete_many.tenant, 'key');
    perform settle_private._check_binding(complete_many.principal, complete_many.scopes, complete_many.binding_generation);
  end if;
  select min(u.i) filter (where (settle_private._name_ok(u.k, settle_private._limit('key_bytes')) and u.a >= 1
                                 and u.f ~ '^v[0-9]+:[0-9a-f]+$' and octet_length(u.f) - strpos(u.f, ':') = 64
                                 and u.n <= settle_private._limit('result_bytes')) is not true),
         sum(u.n)
    into v_bad, v_bytes
    from (select x.k, x.a, x.f, x.i, settle_private._json_bytes(x.r, settle_private._limit('result_bytes')) as n
            from unnest(complete_many.keys, complete_many.attempts, complete_many.fingerprints, complete_many.results)
                 with ordinality x(k, a, f, r, i)) u;
  if v_bad is not null then
    perform settle_private._check_batch_element('complete', v_bad, complete_many.tenant, complete_many.keys[v_bad], null,
      complete_many.principal, complete_many.scopes, complete_many.binding_generation, null, null, null,
      complete_many.attempts[v_bad], complete_many.lease_tokens[v_bad], complete_many.fingerprints[v_bad],
      complete_many.results[v_bad]);
  end if;
  perform settle_private._check_batch_bytes('results', v_bytes);

  -- A batch of lease holders (the common case) settles set-based when nothing can make it differ
  -- from its single completes: access granted and the generation not revoked, every key distinct;
  -- settle_private._complete_holders checks the rest under the row locks and sends the batch
  -- back to the key-by-key path below when any key is not its lease holder's plain success.
  v_floor := settle_private._access(complete_many.tenant, complete_many.principal);
  if v_floor >= 0 and complete_many.binding_generation >= v_floor and settle_private._set_based_batches()
     and (select count(distinct u.k) from unnest(complete_many.keys) u(k)) = cardinality(complete_many.keys) then
    begin
      return query select * from settle_private._complete_holders(complete_many.tenant, complete_many.keys,
        complete_many.attempts, complete_many.lease_tokens, complete_many.fingerprints, complete_many.principal,
        complete_many.scopes, complete_many.binding_generation, complete_many.results);
      return;
    exception when sqlstate 'SE099' then
      null;
    end;
  end if;

  -- One key at a time, in the fixed order (see the top of this file): each by settle.complete,
  -- at the batch's instant as claim_many's (settle_private._keyed_instant).
  loop
    v_floor := settle_private._access(complete_many.tenant, complete_many.principal);
    begin
      v_out := '{}'::settle.complete_many_result[];
      for v_item in
        select u.k, u.a, u.t, u.f, u.r, u.i
          from unnest(complete_many.keys, complete_many.attempts, complete_many.lease_tokens, complete_many.fingerprints,
                      complete_many.results) with ordinality u(k, a, t, f, r, i)
         order by u.k collate "C", u.i
      loop
        v_res := settle.complete(complete_many.tenant, v_item.k, v_item.a, v_item.t, v_item.f, complete_many.principal,
          complete_many.scopes, complete_many.binding_generation, v_item.r);
        v_out := v_out || row(v_item.i, v_item.k, v_res.outcome, v_res.reason, v_res.status, v_res.attempt,
          v_res.settled_attempt, v_res.result, v_res.error, v_res.conflict_on, v_res.dead_lettered,
          v_res.dead_letter_reason)::settle.complete_many_result;
      end loop;
      perform settle_private._keyed_instant(complete_many.tenant, complete_many.principal,
        complete_many.binding_generation, v_floor);
      exit;
    exception when sqlstate 'SE098' then
      null;
    end;
  end loop;
  return query select * from unnest(v_out) o order by o.ordinal;
end
$_$;

ALTER FUNCTION settle.complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) OWNER TO settle_owner;

--
-- Name: FUNCTION complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) IS 'Complete many attempts of one tenant in one call: settle.complete for every key, in one transaction, answered per key.
Parameters: tenant; keys text[] (1 to max_batch_keys = 1000; a key may repeat); attempts integer[], lease_tokens uuid[], fingerprints text[] (from each key''s acquired claim), results jsonb[] (each <= 1 MiB, together <= max_batch_bytes = 16 MiB): one element per key, same order; principal, scopes, binding_generation: the binding presented at claim, shared by every key.
Outcomes: one row per element of keys, in their order: ordinal (1-based), key, and exactly what settle.complete answers for that key (settled | already_settled | duplicate | conflict | fenced, with its reason and the canonical state it discloses). A key listed twice is completed twice, in list order, as a second caller would be (the second, identical, answers duplicate).
SQLSTATEs: SE060 more than 1000 keys; SE061 no key; SE062 a per-key array not one per key; SE063 an array or element NULL (DETAIL: field, ordinal); SE064 the results hold more than 16 MiB of JSON text together; an element that breaks settle.complete''s rules raises its code (SE002 key, SE004 fingerprint, SE005 result, SE008 attempt) with its ordinal in DETAIL; SE001, SE003 for the shared arguments; SE010 a key never claimed; SE013 tenant not granted to this login role. The whole batch is checked before any key is completed: an error settles nothing.
Locking: as settle.complete for each key (its operation row, FOR UPDATE), the keys visited in one fixed order (key COLLATE "C", then ordinal), so concurrent batches never deadlock. Works inside the caller''s transaction: commit a same-database effect atomically with the batch''s settlements.
Idempotency: as settle.complete per key: repeating the batch answers duplicate for every key it settled. Each key leaves what its single complete leaves in settle.audit_log, and its own feed event.';

--
-- Name: dead_letter_in_doubt(interval, integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.dead_letter_in_doubt(older_than interval DEFAULT NULL::interval, batch_size integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_after interval := dead_letter_in_doubt.older_than;
  v_cutoff timestamptz;
  -- Plain values for the per-key call (Citus refuses a forced delegation carrying an expression).
  v_actor text := session_user::text;
  v_mine text[] := settle_private._visible_tenants();
  v_due record;
  v_done integer;
  v_count integer := 0;
begin
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  if v_after is null then
    select s.value into v_after from settle_private.settings s where s.name = 'in_doubt_after';
  elsif v_after < interval '0' or not settle_private._exact(v_after) then
    perform settle_private._raise('SE008', 'older_than must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  v_cutoff := v_now - v_after;
  -- A lock-free scan (on Citus a multi-shard read) through operations_needing_attention_idx, then
  -- one locked, re-checked step per key. A pending operation qualifies only if an attempt did
  -- not record a failure (a lapsed lease nobody reported on): every attempt failing retryably is
  -- not in doubt, and is left for its caller.
  for v_due in
    select o.tenant, o.key from settle_private.operations o
     where o.status in ('pending', 'unknown', 'conflict') and o.dead_lettered_at is null and o.lease_token is null
       and o.updated_at <= v_cutoff
       and (o.status <> 'pending'
            or exists (select 1 from settle_private.attempts a
                        where a.tenant = o.tenant and a.key = o.key and a.observation is distinct from 'failed')
            or not exists (select 1 from settle_private.attempts a
                            where a.tenant = o.tenant and a.key = o.key and a.attempt = o.attempt))
       and (v_mine is null or o.tenant = any (v_mine))
     order by o.updated_at
     limit batch_size
  loop
    -- The FROM form, so that Citus can delegate the call from inside this function.
    select r into v_done from settle_private._dead_letter_in_doubt_key(v_due.tenant, v_due.key, v_cutoff, v_now, v_actor) r;
    v_count := v_count + v_done;
  end loop;
  return v_count;
end
$$;

ALTER FUNCTION settle.dead_letter_in_doubt(older_than interval, batch_size integer) OWNER TO settle_owner;

--
-- Name: FUNCTION dead_letter_in_doubt(older_than interval, batch_size integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.dead_letter_in_doubt(older_than interval, batch_size integer) IS 'Maintenance (the dead_letter_in_doubt upkeep job): dead-letter needs_reconciliation the operations that may have taken effect and that nobody came back for: status unknown or conflict (or pending after a lapsed lease no attempt reported on), no lease held, not dead-lettered, and untouched (no claim, attempt or observation) for older_than. They have budget left, so no attempt would dead-letter them, and a caller that gave up after a timeout leaves them so for good; dead-lettered, the reconciler (settle.lease_reconciliation), settle.dead_letters and `pg-settle dead-letters` see them.
Parameters: older_than (exact, >= 0; default NULL: the stored in_doubt_after, 15 minutes unless settle.set_in_doubt_after changed it); batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations dead-lettered. Each writes an audit row (event expire, outcome dead_lettered, detail cause in_doubt_abandoned, idle_since, dead_letter_reason needs_reconciliation); a pending one moves to unknown, as a spent budget would move it. A caller that claims it afterwards is answered unknown (dead-lettered); a matching success of an earlier attempt still settles it.
SQLSTATEs: SE008 (older_than, batch_size). A login bound to tenants handles only their operations.
Locking: finds candidates without locks, then locks each (FOR UPDATE SKIP LOCKED: a row a caller holds is left) and decides again under the lock. Idempotency: safe to run concurrently and repeatedly.';

--
-- Name: drop_consumer(text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.drop_consumer(name text) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.drop_consumer(name text) OWNER TO settle_owner;

--
-- Name: FUNCTION drop_consumer(name text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.drop_consumer(name text) IS 'Drop a feed consumer and its positions: the events only it had not acknowledged become trimmable (settle.trim_feed).
Parameters: name.
Outcomes: true when it existed, false otherwise (to a tenant-bound login, a consumer beyond its tenants does not exist: false, nothing dropped). Logged in settle.admin_log.
SQLSTATEs: SE008 (name NULL).
Locking: waits for its lanes (a process holding one in an open transaction). Idempotency: a repeat returns false.';

--
-- Name: expire_leases(integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.expire_leases(batch_size integer DEFAULT 1000) RETURNS settle.expire_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  -- Arguments of the per-key call are plain values (variables): Citus refuses a forced
  -- delegation whose call carries an expression such as session_user.
  v_actor text := session_user::text;
  -- A login bound to tenants sweeps only their operations (docs/protocol.md §12).
  v_mine text[] := settle_private._visible_tenants();
  v_due record;
  v_done integer;
  v_res settle.expire_result := row(0, 0);
begin
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  -- A lock-free scan for candidates (on Citus a multi-shard read, where FOR UPDATE is not
  -- allowed), then one locked, re-checked step per key (settle_private._expire_key). The call
  -- is in the FROM form so that Citus can delegate it from inside this function.
  for v_due in
    select o.tenant, o.key from settle_private.operations o
     where ((o.lease_token is not null and o.lease_expires_at <= v_now)
        or (o.lease_token is null and o.status in ('pending', 'unknown', 'conflict') and o.attempt >= o.max_attempts
            and o.dead_lettered_at is null))
       and (v_mine is null or o.tenant = any (v_mine))
     order by o.lease_expires_at nulls last
     limit batch_size
  loop
    select r into v_done from settle_private._expire_key(v_due.tenant, v_due.key, v_now, v_actor) r;
    if v_done > 0 then
      v_res.expired := v_res.expired + 1;
    end if;
    if v_done = 2 then
      v_res.dead_lettered := v_res.dead_lettered + 1;
    end if;
  end loop;
  return v_res;
end
$$;

ALTER FUNCTION settle.expire_leases(batch_size integer) OWNER TO settle_owner;

--
-- Name: FUNCTION expire_leases(batch_size integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.expire_leases(batch_size integer) IS 'Maintenance: end lapsed leases (judged by the database clock) and dead-letter operations whose attempt budget is spent.
Parameters: batch_size (1-100000, default 1000) rows per call; call again while it returns a full batch.
Outcomes: (expired, dead_lettered) counts. Each expiry writes an audit row (event expire, outcome expired or dead_lettered).
Correctness never depends on it: settle.claim takes over a lapsed lease by itself.
SQLSTATEs: SE008. Locking: finds candidates without locks, then locks each one (FOR UPDATE SKIP LOCKED: never waits for a busy row, which the next call handles) and decides again under the lock; a candidate no longer due is left alone.
Idempotency: safe to run concurrently and repeatedly.';

--
-- Name: fail(text, text, integer, uuid, text, text, text[], bigint, jsonb, boolean); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[] DEFAULT '{}'::text[], binding_generation bigint DEFAULT 0, error jsonb DEFAULT '{}'::jsonb, retryable boolean DEFAULT true) RETURNS settle.observation_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return settle_private._observe('fail', fail.tenant, fail.key, fail.attempt, fail.lease_token, fail.fingerprint,
    fail.principal, fail.scopes, fail.binding_generation, null, fail.error, fail.retryable);
end
$$;

ALTER FUNCTION settle.fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean) OWNER TO settle_owner;

--
-- Name: FUNCTION fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean) IS 'Report that this attempt''s effect definitely did not happen.
Parameters: as settle.complete, with error jsonb (<= 64 KiB; default {}, a failure without details) instead of result, and retryable (default true); scopes and binding_generation default as in settle.claim (''{}'', 0).
Outcomes: recorded (reason retryable_failure: the attempt is settled as failed, the lease is released and the next claim opens attempt N+1; the canonical status does not move) | settled (reason final_failure (retryable false, and no attempt may have taken effect): status failed with this error, a committed failure; reason attempts_exhausted: the last allowed attempt failed and every attempt recorded a failure: status failed, dead-lettered) | recorded (reason needs_reconciliation: a final failure, or the last allowed attempt failed, but the operation may have taken effect (its status is unknown or conflict, or an earlier attempt reported unknown, conflicted, or its lease lapsed without an observation): status at least unknown, never failed; dead-lettered with dead_letter_reason needs_reconciliation) | fenced (reason superseded / settled / lease_released / invalid_token: a failure of an attempt that no longer holds the lease never changes the canonical record) | duplicate | already_settled | conflict (as for complete, but the status never moves above running/pending; the attempt records conflict and loses its lease, and is fenced from then on: attempt_conflicted).
A later matching success still upgrades failed to completed (completed outranks failed).
Fenced binding_revoked as for complete.
SQLSTATEs: SE001-SE004, SE006 (error, retryable), SE008, SE010, SE013.
Locking: the operation row (FOR UPDATE). Idempotency: repeating answers duplicate.';

--
-- Name: fingerprint(jsonb); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.fingerprint(request jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT SECURITY DEFINER PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select settle_private._fingerprint(request)
$$;

ALTER FUNCTION settle.fingerprint(request jsonb) OWNER TO settle_owner;

--
-- Name: FUNCTION fingerprint(request jsonb); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.fingerprint(request jsonb) IS 'Request fingerprint, algorithm v1: ''v1:'' || hex(sha256(canonical JSON text)).
Parameters: request jsonb (the effect-defining fields).
Canonical form: PostgreSQL jsonb text rendering (keys de-duplicated and sorted, fixed spacing) with numbers printed without trailing fractional zeros, so {"b":1,"a":10.50} and {"a":10.5,"b":1} share a fingerprint.
Outcomes: text; NULL for NULL input.
Locking: none. Idempotency: pure (IMMUTABLE). settle.claim computes it once, at first claim; clients never compute it.';

--
-- Name: get(text, text, jsonb, text, text[], bigint); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.get(tenant text, key text, request jsonb, principal text, scopes text[] DEFAULT '{}'::text[], binding_generation bigint DEFAULT 0) RETURNS settle.get_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_floor bigint;
  v_fp text;
  v_op settle_private.operations;
  v_diff text[];
  v_res settle.get_result;
begin
  if (settle_private._name_ok(get.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(get.key, settle_private._limit('key_bytes'))
      and settle_private._binding_ok(get.principal, get.scopes, get.binding_generation)
      and settle_private._json_ok(get.request, settle_private._limit('request_bytes'))) is not true then
    perform settle_private._check_operation_key(get.tenant, get.key);
    perform settle_private._check_binding(get.principal, get.scopes, get.binding_generation);
    perform settle_private._check_json(get.request, 'request', settle_private._limit('request_bytes'), 'SE004');
  end if;
  v_floor := settle_private._access(get.tenant, get.principal);
  if v_floor < 0 then
    perform settle_private._refuse_tenant(get.tenant, get.key, 'get');
  end if;
  v_fp := settle_private._fingerprint(get.request);

  if get.binding_generation < v_floor then
    -- A revoked generation reads nothing, from a plain read (it must not wait on
    -- the row); the operation it reserved is converted at the next touch by a caller that may wait.
    select * into v_op from settle_private.operations o where o.tenant = get.tenant and o.key = get.key;
    perform settle_private._audit(get.tenant, get.key, v_now, 'get', 'refused', null, v_op.status, v_op.status, null,
      jsonb_build_object('reason', 'binding_revoked', 'below_generation', v_floor,
        'presented', settle_private._presented(v_fp, get.principal, get.scopes, get.binding_generation, null, null)));
    v_res.outcome := 'refused';
    v_res.reason := 'binding_revoked';
    return v_res;
  end if;

  select * into v_op from settle_private.operations o where o.tenant = get.tenant and o.key = get.key;
  if not found then
    v_res.outcome := 'not_found';
    return v_res;
  end if;

  v_diff := settle_private._lock_diff(v_op, v_fp, get.principal, get.scopes, get.binding_generation);
  if v_diff = array['binding_generation'] and v_op.binding_generation < v_floor then
    -- The same principal, re-authenticated above the floor, reading the operation it reserved
    -- under a revoked generation: the safe path after re-authentication. The operation is
    -- converted under its row lock first, so the answer is final: completed stays completed,
    -- anything else can never complete.
    v_op := settle_private._revoke_touch(get.tenant, get.key, get.principal, v_floor, v_now, null);
    v_res.reason := 'reauthenticated';
  elsif cardinality(v_diff) > 0 then
    perform settle_private._audit(get.tenant, get.key, v_now, 'get', 'conflict', null, v_op.status, v_op.status, null,
      jsonb_build_object('conflict_on', v_diff,
        'presented', settle_private._presented(v_fp, get.principal, get.scopes, get.binding_generation, null, null)));
    v_res.outcome := 'conflict';
    v_res.reason := 'lock_mismatch';
    v_res.conflict_on := settle_private._conflict_on(v_diff);
    return v_res;
  end if;

  v_res.outcome := 'found';
  v_res.status := v_op.status;
  v_res.attempt := v_op.attempt;
  v_res.settled_attempt := v_op.settled_attempt;
  v_res.result := v_op.result;
  v_res.error := v_op.error;
  v_res.dead_lettered := v_op.dead_lettered_at is not null;
  v_res.in_flight := coalesce(v_op.lease_expires_at > v_now, false);
  v_res.created_at := v_op.created_at;
  return v_res;
end
$$;

ALTER FUNCTION settle.get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: FUNCTION get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint) IS 'The lock-gated read: the canonical state of one operation, for the caller that holds its reservation lock (a client that re-reads after a lost response).
Parameters: tenant, key, request (as claimed), principal, scopes, binding_generation (as claimed; the same limits as settle.claim).
Outcomes: found (the lock matches: status, attempt, settled_attempt, result (completed only), error, dead_lettered, in_flight, created_at; reason reauthenticated when the same principal reads above a revocation floor an operation reserved under a revoked generation, which is first moved to conflict if it was not completed) | not_found (no such operation, or purged) | conflict (request or binding differ: only conflict_on, like a conflicting claim; audited with what was presented) | refused (reason binding_revoked: the presented generation is below the floor of settle.revoke_binding; audited).
SQLSTATEs: SE001-SE004 (arguments), SE013 (tenant not granted to this login role).
Locking: none for found, not_found and conflict (a snapshot read); the operation row (FOR UPDATE) when it is converted after a revocation. Writes an audit row for conflict and refused only (a read-only transaction then raises 25006).
Idempotency: repeatable; reads change nothing except the one-time conversion of a revoked operation.';

--
-- Name: grant_tenant(text, text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.grant_tenant(role text, tenant text) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_oid oid;
  v_mine text[] := settle_private._visible_tenants();
  v_dropped jsonb;
  v_roles oid[];
  v_tenants text[];
begin
  v_oid := settle_private._check_login_role(grant_tenant.role);
  perform settle_private._check_name(grant_tenant.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  if v_mine is not null then
    if not (grant_tenant.tenant = any (v_mine)) then
      perform settle_private._refuse_tenant(grant_tenant.tenant, null, 'grant_tenant');
    end if;
    perform settle_private._check_role_within(grant_tenant.role, v_mine, 'grant_tenant');
  end if;
  -- Rows recorded under this name for a role that no longer exists belong to nobody who can
  -- log in: the role granted now starts from its own binding (the dropped rows are logged).
  -- (pg_roles read first, not joined: see _binding_rows_of.)
  v_roles := array(select r.oid from pg_catalog.pg_roles r);
  select jsonb_agg(jsonb_build_object('role_oid', b.role_oid, 'tenants', b.tenants)) into v_dropped
    from settle_private.tenant_bindings b
   where b.role_name = grant_tenant.role and b.role_oid <> v_oid and not (b.role_oid = any (v_roles));
  if v_dropped is not null then
    delete from settle_private.tenant_bindings b
     where b.role_name = grant_tenant.role and b.role_oid <> v_oid and not (b.role_oid = any (v_roles));
  end if;
  perform 1 from settle_private._binding_rows_of(grant_tenant.role);
  insert into settle_private.tenant_bindings as b (role_oid, role_name, tenants, bound_at, updated_at)
  values (v_oid, grant_tenant.role, array[grant_tenant.tenant], v_now, v_now)
  on conflict on constraint tenant_bindings_pkey do update
     -- A function, not a subquery: Citus refuses subqueries in an INSERT (a reference table there).
     set tenants = settle_private._sort_scopes(b.tenants || excluded.tenants),
         role_name = excluded.role_name, updated_at = excluded.updated_at
  returning b.tenants into v_tenants;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'grant_tenant', session_user::text,
          jsonb_build_object('role', grant_tenant.role, 'tenant', grant_tenant.tenant, 'tenants', v_tenants)
          || case when v_dropped is not null then jsonb_build_object('dropped_role_bindings', v_dropped) else '{}'::jsonb end);
  return v_tenants;
end
$$;

ALTER FUNCTION settle.grant_tenant(role text, tenant text) OWNER TO settle_owner;

--
-- Name: FUNCTION grant_tenant(role text, tenant text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.grant_tenant(role text, tenant text) IS 'Admin: bind a login role to a tenant. A login role that holds tenant grants can claim, observe, heartbeat and read only those tenants; any other tenant answers SE013 and discloses nothing. A role without grants is a trusted multi-tenant service. The binding follows the role (its OID) through a rename.
Parameters: role (an existing login role: the role a service connects as, session_user), tenant (as settle.claim).
Outcomes: the tenants the role may reach now (sorted). Bindings left under this name by a dropped role are removed (logged as dropped_role_bindings).
SQLSTATEs: SE001 (tenant), SE008 (role does not exist or cannot log in), SE013 (the caller is bound and tenant is not one of its tenants), SE019 (the caller is bound and the role is unbound or reaches other tenants), 42501 (not settle_admin).
Locking: the role''s binding row. Logged in settle.admin_log. In force for every call that starts after the commit.
Idempotency: granting a held tenant changes nothing but the log.';

--
-- Name: heartbeat(text, text, integer, uuid, interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval DEFAULT '00:00:30'::interval) RETURNS settle.heartbeat_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_res settle.heartbeat_result;
  v_floor bigint;
  v_seen record;
  v_tenant_ok boolean;
  v_valid boolean;
begin
  if (settle_private._name_ok(heartbeat.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(heartbeat.key, settle_private._limit('key_bytes'))
      and heartbeat.attempt >= 1 and heartbeat.lease_token is not null
      and settle_private._lease_ok(heartbeat.lease)) is not true then
    perform settle_private._check_observation_args(heartbeat.tenant, heartbeat.key, heartbeat.attempt,
      heartbeat.lease_token);
    perform settle_private._check_lease(heartbeat.lease);
  end if;

  -- The tenant binding and the token are checked before the row lock: a caller without the
  -- named attempt's token never waits on the row, so it cannot hold the lease holder up by
  -- keeping its transaction open. An attempt's token never changes.
  -- The binding is read in its own statement: on Citus a function reading the bindings (a
  -- reference table) may not run inside a statement routed to the key's shard.
  -- The token likewise (it reads the key's operation and attempts in statements of its own).
  v_tenant_ok := settle_private._tenant_ok(heartbeat.tenant);
  v_valid := settle_private._is_attempt_token(heartbeat.tenant, heartbeat.key, heartbeat.attempt, heartbeat.lease_token);
  with a as materialized (
    select v_tenant_ok as tenant_ok, v_valid as valid
  )
  select a.tenant_ok, a.valid, x.op into v_seen
    from a left join lateral (
      select o as op from settle_private.operations o
       where o.tenant = heartbeat.tenant and o.key = heartbeat.key and a.tenant_ok and a.valid
         for update) x on true;
  if not v_seen.tenant_ok then
    perform settle_private._refuse_tenant(heartbeat.tenant, heartbeat.key, 'heartbeat');
  end if;
  if not v_seen.valid or (v_seen.op).tenant is null then
    -- (A valid token whose operation was purged while this call waited: a straggler too.)
    v_op := settle_private._lock_operation(heartbeat.tenant, heartbeat.key, purged_ok => true, lock => false);
    -- No such attempt or not its token (a purged key: a straggler): audited, nothing disclosed.
    v_writes := v_writes + settle_private._audit(heartbeat.tenant, heartbeat.key, v_now, 'heartbeat', 'fenced', heartbeat.attempt,
      v_op.status, v_op.status, null, jsonb_build_object(
        'reason', case when v_op.tenant is null then 'operation_purged' else 'invalid_token' end));
    v_res.outcome := 'fenced';
    v_res.reason := 'invalid_token';
    return v_res;
  end if;
  v_op := v_seen.op;

  -- Locked: decide again with what committed while this call waited. The new
  -- lease is measured from now, the moment of the decision, never from the call's start: a
  -- heartbeat that waited on the row never answers `extended` with an expiry in the past.
  v_now := clock_timestamp();
  if not settle_private._tenant_ok(heartbeat.tenant) then
    perform settle_private._refuse_tenant(heartbeat.tenant, heartbeat.key, 'heartbeat');
  end if;
  -- An attempt reserved under a revoked binding generation keeps no lease (00007).
  v_floor := settle_private._floor(heartbeat.tenant, v_op.principal);
  if v_op.binding_generation < v_floor then
    v_res := settle_private._heartbeat_revoked(v_op, heartbeat.attempt, heartbeat.lease_token, v_floor, v_now);
    if v_res.outcome is not null then
      return v_res;
    end if;
  end if;

  if v_op.lease_token is not null and v_op.attempt = heartbeat.attempt and v_op.lease_token = heartbeat.lease_token then
    -- The current attempt keeps its lease, even if it lapsed while nobody took over.
    update settle_private.operations o
       set lease_expires_at = settle_private._expiry(v_now, heartbeat.lease), updated_at = v_now
     where o.tenant = heartbeat.tenant and o.key = heartbeat.key;
    v_res.outcome := 'extended';
    v_res.status := v_op.status;
    v_res.lease_expires_at := settle_private._expiry(v_now, heartbeat.lease);
    return v_res;
  end if;

  -- A valid token of an attempt that no longer holds the lease: told why, audited.
  v_res.outcome := 'fenced';
  v_res.reason := settle_private._fence_reason(v_op, heartbeat.attempt);
  v_res.status := v_op.status;
  v_writes := v_writes + settle_private._audit(heartbeat.tenant, heartbeat.key, v_now, 'heartbeat', 'fenced', heartbeat.attempt,
    v_op.status, v_op.status, null, jsonb_build_object('reason', v_res.reason));
  return v_res;
end
$$;

ALTER FUNCTION settle.heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval) OWNER TO settle_owner;

--
-- Name: FUNCTION heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval) IS 'Extend the lease of the current attempt.
Parameters: tenant, key, attempt and lease_token as returned by settle.claim; lease interval (1 s - 1 day, default 30 s) from now, by the database clock.
Outcomes: extended (lease_expires_at) | fenced with reason invalid_token (no such attempt/token; nothing disclosed), superseded (a later attempt owns the operation), settled (the operation is completed or failed: stop working), lease_released (this attempt already reported, or its lease was expired by the sweeper).
A current attempt whose lease lapsed but was not yet taken over is extended.
Also fenced with reason binding_revoked: the attempt''s reservation is under a revoked binding generation (settle.revoke_binding); the operation moves to conflict.
SQLSTATEs: SE001, SE002, SE007, SE008 (bad arguments), SE010 (operation not found), SE013 (tenant not granted to this login role).
Locking: the operation row (FOR UPDATE), only for a caller presenting the attempt''s own token; an invalid token is answered from a plain read and never waits. The new lease is measured from the decision under the lock. Idempotency: repeating extends again; fenced calls change nothing but write an audit row.';

--
-- Name: status_rank(settle.status); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.status_rank(status settle.status) RETURNS smallint
    LANGUAGE sql IMMUTABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select settle_private._rank(status)
$$;

ALTER FUNCTION settle.status_rank(status settle.status) OWNER TO settle_owner;

--
-- Name: FUNCTION status_rank(status settle.status); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.status_rank(status settle.status) IS 'Rank of a status in the settlement lattice: pending and running 1, unknown 2, conflict 3, failed 4, completed 5; NULL (no observation) 0.
Parameters: status.
Outcomes: a smallint; never raises.
Locking: none. Idempotency: pure (IMMUTABLE).';

--
-- Name: _visible_tenants(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._visible_tenants() RETURNS text[]
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_me oid := to_regrole(quote_ident(session_user::text))::oid;
  v_rows integer;
  v_tenants text[];
begin
  select count(*), array(select t from (select distinct u.t from settle_private.tenant_bindings b1, unnest(b1.tenants) as u(t)
                                          where b1.role_oid = v_me or b1.role_name = session_user::text) d
                          where not exists (select 1 from settle_private.tenant_bindings b2
                                             where (b2.role_oid = v_me or b2.role_name = session_user::text)
                                               and not (d.t = any (b2.tenants)))
                          order by 1)
    into v_rows, v_tenants
    from settle_private.tenant_bindings b
   where b.role_oid = v_me or b.role_name = session_user::text;
  return case when v_rows > 0 then v_tenants end;
end
$$;

ALTER FUNCTION settle_private._visible_tenants() OWNER TO settle_owner;

--
-- Name: operations; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.operations (
    tenant text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    request jsonb NOT NULL,
    principal text NOT NULL,
    scopes text[] NOT NULL,
    binding_generation bigint NOT NULL,
    max_attempts integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    redrive_count integer DEFAULT 0 NOT NULL,
    attempt integer NOT NULL,
    attempt_token uuid NOT NULL,
    worker text,
    claimed_at timestamp with time zone NOT NULL,
    claimed_by text,
    claim_seq bigint,
    claim_audit_id bigint,
    claim_status_before settle.status,
    claim_status_after settle.status,
    status settle.status NOT NULL,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    result jsonb,
    settled_attempt integer,
    settled_at timestamp with time zone,
    settled_seq bigint,
    settled_audit_id bigint,
    settled_status_before settle.status,
    settled_reason text,
    settled_by text,
    error jsonb,
    dead_lettered_at timestamp with time zone,
    dead_letter_reason text,
    updated_at timestamp with time zone NOT NULL
)
WITH (fillfactor='80');

ALTER TABLE ONLY settle_private.operations FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.operations OWNER TO settle_owner;

--
-- Name: TABLE operations; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.operations IS 'Canonical record per (tenant, key): the immutable reservation lock, the lattice status, the current attempt epoch (its identity, claim log and lease), the immutable result and the log of the one settlement. Private: use the settle API.';

--
-- Name: operations; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.operations AS
 SELECT o.tenant,
    o.key,
    o.status,
    settle.status_rank(o.status) AS status_rank,
    o.attempt,
    o.max_attempts,
    COALESCE((o.lease_expires_at > statement_timestamp()), false) AS in_flight,
    o.lease_expires_at,
    o.result,
    o.settled_attempt,
    o.settled_at,
    o.error,
    o.dead_lettered_at,
    o.dead_letter_reason,
    o.redrive_count,
    o.fingerprint,
    o.principal,
    o.scopes,
    o.binding_generation,
    o.request,
    o.created_at,
    o.updated_at
   FROM settle_private.operations o
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (o.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.operations OWNER TO settle_owner;

--
-- Name: VIEW operations; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.operations IS 'Canonical record of every operation (read-only). in_flight: a lease is held and has not lapsed by the database clock at the start of the reading statement. The lease token itself is never shown.';

--
-- Name: inspect(text, text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.inspect(tenant text, key text) RETURNS SETOF settle.operations
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if not settle_private._tenant_ok(inspect.tenant) then
    perform settle_private._refuse_tenant(inspect.tenant, inspect.key, 'inspect');
  end if;
  return query select * from settle.operations v where v.tenant = inspect.tenant and v.key = inspect.key;
end
$$;

ALTER FUNCTION settle.inspect(tenant text, key text) OWNER TO settle_owner;

--
-- Name: FUNCTION inspect(tenant text, key text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.inspect(tenant text, key text) IS 'The unrestricted read of one operation for support staff and DBAs: the whole canonical record, including request, principal, scopes, fingerprint and result. Granted to settle_readonly and settle_admin only, never to settle_app.
Parameters: tenant, key.
Outcomes: one row of settle.operations, or no row when the operation does not exist (or was purged).
SQLSTATEs: SE013 (a login role bound to other tenants).
Locking: none (a snapshot read). Idempotency: read-only.';

--
-- Name: lease_reconciliation(text, interval, integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.lease_reconciliation(holder text, lease interval DEFAULT '00:01:00'::interval, batch_size integer DEFAULT 10) RETURNS SETOF settle.reconciliation_lease
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_due record;
  v_token uuid;
  v_checks integer;
  v_op settle_private.operations;
  -- The caller's tenants (NULL: every tenant), read once: a per-row call of _tenant_ok in the
  -- scan would be a query inside a query on each shard on Citus (docs/scale-out.md).
  v_tenants text[] := settle_private._visible_tenants();
begin
  perform settle_private._check_name(holder, 'holder', settle_private._limit('worker_bytes'), 'SE008');
  perform settle_private._check_lease(lease);
  perform settle_private._check_count(batch_size, 'batch_size', settle_private._limit('max_batch_size'));
  -- Leases of operations that no longer need reconciliation (settled by a late success) go.
  delete from settle_private.reconciliation_leases l
   where l.expires_at <= v_now
     and not exists (select 1 from settle_private.operations o
                      where o.tenant = l.tenant and o.key = l.key and o.dead_letter_reason = 'needs_reconciliation');
  for v_due in
    select o.tenant, o.key from settle_private.operations o
      left join settle_private.reconciliation_leases l on l.tenant = o.tenant and l.key = o.key
     where o.dead_letter_reason = 'needs_reconciliation' and o.lease_token is null
       and (l.expires_at is null or l.expires_at <= v_now)
       and (v_tenants is null or o.tenant = any (v_tenants))
     order by o.dead_lettered_at, o.tenant, o.key
     limit batch_size
  loop
    -- Taken only if nobody holds a live lease on it now (a concurrent reconciler may have
    -- leased it since the scan): ON CONFLICT sees the latest committed lease.
    v_token := gen_random_uuid();
    v_checks := null;
    insert into settle_private.reconciliation_leases as l (tenant, key, lease_token, holder, leased_at, expires_at)
    values (v_due.tenant, v_due.key, v_token, lease_reconciliation.holder, v_now, v_now + lease_reconciliation.lease)
    on conflict on constraint reconciliation_leases_pkey do update
      set lease_token = excluded.lease_token, holder = excluded.holder, leased_at = excluded.leased_at,
          expires_at = excluded.expires_at, checks = l.checks + 1
      where l.expires_at <= v_now
    returning l.checks into v_checks;
    continue when v_checks is null;
    select * into v_op from settle_private.operations o where o.tenant = v_due.tenant and o.key = v_due.key;
    return next row(v_op.tenant, v_op.key, v_op.status, v_op.attempt, v_op.fingerprint, v_op.request, v_op.principal,
      v_op.scopes, v_op.error, v_op.dead_letter_reason, v_op.dead_lettered_at, v_op.created_at, v_token,
      v_now + lease_reconciliation.lease, v_checks)::settle.reconciliation_lease;
  end loop;
end
$$;

ALTER FUNCTION settle.lease_reconciliation(holder text, lease interval, batch_size integer) OWNER TO settle_owner;

--
-- Name: FUNCTION lease_reconciliation(holder text, lease interval, batch_size integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.lease_reconciliation(holder text, lease interval, batch_size integer) IS 'Lease up to batch_size operations needing reconciliation (dead-lettered needs_reconciliation, no attempt lease held) that no reconciler holds a live lease on, oldest dead letter first, for the caller to check downstream and settle with settle.resolve.
Parameters: holder (the reconciler process, 1-128 bytes); lease (1 second - 1 day, default 1 minute: while it runs no other reconciler leases the operation; an operation left undecided is leased again after it); batch_size (1-100000, default 10).
Outcomes: the leased operations with what a downstream lookup needs (request, fingerprint, principal, error), lease_token, lease_expires_at and checks (how many times it was leased). Only tenants the login role may reach.
SQLSTATEs: SE007 (lease), SE008 (holder, batch_size).
Locking: no operation row lock; each lease row is taken with INSERT ... ON CONFLICT, so concurrent reconcilers never hold a live lease on the same operation. Idempotency: each call takes new leases.';

--
-- Name: purge(interval, integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.purge(older_than interval, batch_size integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.purge(older_than interval, batch_size integer) OWNER TO settle_owner;

--
-- Name: FUNCTION purge(older_than interval, batch_size integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.purge(older_than interval, batch_size integer) IS 'Retention: the only path that deletes. Removes terminal (completed or failed) operations last updated before now - older_than, with their attempts and audit rows, leaving one tombstone audit row (event purge) per purged key. A tombstone older than the cutoff is removed in a later call, with the rows of calls made on the purged key after it (and their overflow count), once the key has no operation and none of those rows is younger than the cutoff.
Parameters: older_than interval (>= 0), batch_size (1-100000, default 1000); call again while it returns a full batch.
Outcomes: the number of operations purged. A purged key can be claimed again as a new operation. A login bound to tenants purges only their operations.
SQLSTATEs: SE008, SE014. Locking: finds candidates without locks, then locks each one (FOR UPDATE SKIP LOCKED: a busy row waits for the next call) and checks it again under the lock.
Idempotency: safe to repeat and to run concurrently.';

--
-- Name: read_feed(text, integer, interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.read_feed(consumer text, batch_size integer DEFAULT 100, lease interval DEFAULT '00:00:30'::interval) RETURNS SETOF settle.feed_event
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.read_feed(consumer text, batch_size integer, lease interval) OWNER TO settle_owner;

--
-- Name: FUNCTION read_feed(consumer text, batch_size integer, lease interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.read_feed(consumer text, batch_size integer, lease interval) IS 'Read the next batch of a consumer: up to batch_size events of one lane, in feed order, leased to the caller.
Parameters: consumer; batch_size (1-100000, default 100); lease (1 second - 1 day, default 30 seconds): how long the lane stays with this caller without an ack.
Outcomes: the events (settle.feed_event), all of one lane and one lease; no rows when every lane is leased to another process or has nothing committed below the horizon (the oldest running transaction: see docs/feed.md). Events are returned only once their writing transaction and every older one has ended (transaction-id fencing), so no event can appear later behind the position.
Read, apply and settle.ack_feed in one transaction for exactly-once processing in this database: the lane stays locked until commit; a rollback (or a killed process) re-delivers the batch. Outside a transaction the lease is committed: a process that dies re-delivers after the lease lapses (at least once).
SQLSTATEs: SE008 (consumer NULL, batch_size), SE007 (lease), SE040 (no such consumer; to a login bound to tenants also a consumer not limited to them: the same answer, nothing disclosed).
Locking: the returned lane (FOR UPDATE SKIP LOCKED), until the end of the transaction. Idempotency: a repeat in the same transaction reads the next free lane; a repeat after a rollback reads the same batch.';

--
-- Name: redrive(text, text, integer, jsonb, text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.redrive(tenant text, key text, additional_attempts integer DEFAULT 1, request jsonb DEFAULT NULL::jsonb, reason text DEFAULT NULL::text) RETURNS SETOF settle.operations
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text) OWNER TO settle_owner;

--
-- Name: FUNCTION redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text) IS 'Re-open a dead-lettered operation for new attempt epochs, keeping its key, fingerprint and binding.
Parameters: tenant, key; additional_attempts (1-1000, default 1) added to the spent budget; request (optional: if given, it must match the reservation, else SE012); reason (optional, <= 1024 bytes, kept in the audit row).
Outcomes: the re-opened record (redrive_count + 1, budget raised). Dead letter reason attempts_exhausted: status pending (the lattice allows this one move down, only when every attempt recorded a failure; the audit row keeps the previous error). Reason needs_reconciliation: the status stays unknown (or conflict), never lower: redrive only after checking downstream that the effect did not happen (or that the downstream deduplicates it), since the next attempt runs it again.
SQLSTATEs: SE001, SE002, SE008, SE013 (the caller is bound to other tenants: raised before anything is read), SE010 (not found), SE011 (not dead-lettered: also what a second, concurrent redrive gets), SE012 (request differs).
Locking: the operation row (FOR UPDATE): concurrent redrives never double-open.
Idempotency: not idempotent by design; a repeat answers SE011 once the first has re-opened the operation.';

--
-- Name: register_consumer(text, text[], integer, text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.register_consumer(name text, tenants text[] DEFAULT NULL::text[], lanes integer DEFAULT 1, start_at text DEFAULT 'latest'::text) RETURNS settle.feed_consumer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.register_consumer(name text, tenants text[], lanes integer, start_at text) OWNER TO settle_owner;

--
-- Name: FUNCTION register_consumer(name text, tenants text[], lanes integer, start_at text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.register_consumer(name text, tenants text[], lanes integer, start_at text) IS 'Register a named feed consumer with its own position per lane.
Parameters: name (1-128 bytes, same rules as a key); tenants (NULL: every tenant; else the only tenants it receives: a tenant-bound login role may read only a consumer whose tenants it holds); lanes (1-64, default 1: the consumer''s processes share the work lane by lane, a key''s events stay in one lane); start_at latest (default: events from now on) or earliest (every event still retained).
Outcomes: the consumer (created true), or the existing one when it is registered already with the same tenants and lanes (created false). Logged in settle.admin_log.
SQLSTATEs: SE001 (a tenant), SE008 (name, lanes, start_at, empty tenants), SE019 (a tenant-bound login registering beyond its tenants), SE041 (exists with another definition; its tenants and lanes are in the detail for an unbound login only: consumer names are engine-wide, a tenant-bound login learns only that the name is taken).
Locking: the consumer row; a new consumer also the feed''s trim lock (an advisory lock: waits for a settle.trim_feed in progress). Idempotency: repeating the same registration returns the existing consumer.';

--
-- Name: release_reconciliation(text, text, uuid, interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval DEFAULT '00:00:00'::interval) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_rows integer;
begin
  perform settle_private._check_operation_key(release_reconciliation.tenant, release_reconciliation.key);
  if retry_after is null or retry_after < interval '0' or retry_after > interval '1 day'
     or not settle_private._exact(retry_after) then
    perform settle_private._raise('SE008', 'retry_after must be an exact duration between 0 and 1 day',
      jsonb_build_object('field', 'retry_after'), null);
  end if;
  update settle_private.reconciliation_leases l
     set expires_at = clock_timestamp() + release_reconciliation.retry_after
   where l.tenant = release_reconciliation.tenant and l.key = release_reconciliation.key
     and l.lease_token = release_reconciliation.lease_token;
  get diagnostics v_rows = row_count;
  return v_rows > 0;
end
$$;

ALTER FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval) OWNER TO settle_owner;

--
-- Name: FUNCTION release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval) IS 'Give back a reconciler lease on an operation the downstream could not decide (yet): another reconciler may lease it after retry_after.
Parameters: tenant, key, lease_token (from settle.lease_reconciliation), retry_after (0 - 1 day, default 0).
Outcomes: true when the lease was this token''s (and is now released), false otherwise (lapsed and taken by another, or resolved).
SQLSTATEs: SE001, SE002, SE008. Locking: the lease row. Idempotency: repeating moves the release time again.';

--
-- Name: report_unknown(text, text, integer, uuid, text, text, text[], bigint); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint) RETURNS settle.observation_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return settle_private._observe('report_unknown', report_unknown.tenant, report_unknown.key, report_unknown.attempt,
    report_unknown.lease_token, report_unknown.fingerprint, report_unknown.principal, report_unknown.scopes,
    report_unknown.binding_generation, null, null, null);
end
$$;

ALTER FUNCTION settle.report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: FUNCTION report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint) IS 'Report that this attempt lost the response of its effect: it may or may not have happened. Timeout means unknown, never failure.
Parameters: as settle.complete, without a result.
Outcomes: recorded (reason outcome_unknown: status becomes unknown unless already higher, the lease is released; a later success of this same attempt still settles; on the last allowed attempt the operation is also dead-lettered with dead_letter_reason needs_reconciliation: dead_lettered true in the answer) | fenced (the attempt no longer holds the lease: nothing changes) | already_settled (the attempt already reported a terminal outcome, e.g. success then timeout: completed is kept) | conflict | fenced invalid_token.
Fenced binding_revoked as for complete.
SQLSTATEs: SE001-SE004, SE008, SE010, SE013.
Locking: the operation row (FOR UPDATE). Idempotency: a repeated unknown is fenced (the lease is gone) and changes nothing.';

--
-- Name: reset_consumer(text, timestamp with time zone, boolean); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.reset_consumer(name text, to_time timestamp with time zone DEFAULT NULL::timestamp with time zone, dry_run boolean DEFAULT false) RETURNS SETOF settle.feed_reset
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.reset_consumer(name text, to_time timestamp with time zone, dry_run boolean) OWNER TO settle_owner;

--
-- Name: FUNCTION reset_consumer(name text, to_time timestamp with time zone, dry_run boolean); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.reset_consumer(name text, to_time timestamp with time zone, dry_run boolean) IS 'Move every lane of a consumer to a new position: re-deliver retained events, or skip a backlog.
Parameters: name; to_time (NULL, default: skip to now, everything committed is passed over; a time: deliver again every retained event from the first one written at or after it, in feed order; ''-infinity'': every retained event. The lane never goes above the horizon: an outcome of a transaction still running is delivered when it commits, and committed events above the horizon are delivered again); dry_run (default false: only report).
Outcomes: one row per lane (settle.feed_reset): positions before and after, events the lane will deliver, applied. Leases are cleared: a process still holding one is fenced at its next ack (SE042). Logged in settle.admin_log.
SQLSTATEs: SE008 (dry_run NULL), SE040 (no such consumer; to a tenant-bound login also a consumer beyond its tenants: the same answer).
Locking: the consumer''s lanes (FOR UPDATE): waits for a process holding one in an open transaction; unless dry_run, the feed''s trim lock (an advisory lock: waits for a settle.trim_feed in progress). Idempotency: repeating it moves to the same position (when no event was written in between).';

--
-- Name: resolve(text, text, text, integer, text, text, jsonb, jsonb, jsonb, settle.status); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb DEFAULT NULL::jsonb, error jsonb DEFAULT NULL::jsonb, evidence jsonb DEFAULT NULL::jsonb, expected_status settle.status DEFAULT NULL::settle.status) RETURNS settle.resolve_result
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_now timestamptz := clock_timestamp();
  v_writes integer := 0;
  v_op settle_private.operations;
  v_before settle.status;
  v_attempt integer;
  v_seq bigint;
  v_audit_id bigint;
  v_token uuid;
  v_worker text;
  v_open jsonb;
  v_res settle.resolve_result;
  v_detail jsonb;
begin
  perform settle_private._check_operation_key(resolve.tenant, resolve.key);
  if resolve.fingerprint is null or resolve.fingerprint !~ '^v[0-9]+:[0-9a-f]{64}$' then
    perform settle_private._raise('SE004', 'fingerprint must be the reservation''s fingerprint (v<n>:<64 hex>)',
      jsonb_build_object('field', 'fingerprint'), 'Read it from settle.inspect or settle.operations.');
  end if;
  if resolve.expected_attempt is null or resolve.expected_attempt < 1 then
    perform settle_private._raise('SE008', 'expected_attempt is required: the attempt the checked evidence concerns (>= 1)',
      jsonb_build_object('field', 'expected_attempt'), 'Read it with the operation (settle.inspect: attempt) when you check the downstream.');
  end if;
  if resolve.outcome is null or resolve.outcome not in ('completed', 'failed') then
    perform settle_private._raise('SE008', 'outcome must be completed or failed',
      jsonb_build_object('field', 'outcome'), null);
  end if;
  if resolve.reason is null or settle_private._is_blank(resolve.reason)
     or octet_length(resolve.reason) > settle_private._limit('reason_bytes') then
    perform settle_private._raise('SE008', format('reason is required (1-%s bytes): why, and the ticket',
        settle_private._limit('reason_bytes')),
      jsonb_build_object('field', 'reason'), 'Every resolution records why it was made.');
  end if;
  if resolve.outcome = 'completed' then
    perform settle_private._check_json(resolve.result, 'result', settle_private._limit('result_bytes'), 'SE005');
    if resolve.error is not null then
      perform settle_private._raise('SE008', 'a completed resolution takes a result, not an error',
        jsonb_build_object('field', 'error'), null);
    end if;
  else
    perform settle_private._check_json(resolve.error, 'error', settle_private._limit('error_bytes'), 'SE006');
    if resolve.result is not null then
      perform settle_private._raise('SE008', 'a failed resolution takes an error, not a result',
        jsonb_build_object('field', 'result'), null);
    end if;
  end if;
  if resolve.evidence is not null and not settle_private._json_ok(resolve.evidence, settle_private._limit('error_bytes')) then
    perform settle_private._raise('SE008', format('evidence must be at most %s bytes of JSON text', settle_private._limit('error_bytes')),
      jsonb_build_object('field', 'evidence'), 'Keep a reference to large evidence (a ticket, a statement id).');
  end if;
  if not settle_private._tenant_ok(resolve.tenant) then
    perform settle_private._refuse_tenant(resolve.tenant, resolve.key, 'resolve');
  end if;

  v_op := settle_private._lock_operation(resolve.tenant, resolve.key);
  v_before := v_op.status;
  if v_op.fingerprint <> resolve.fingerprint then
    perform settle_private._raise('SE052', 'resolve refused: the fingerprint is not the reservation''s',
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key),
      'The key may have been purged and claimed again: read the operation again (settle.inspect) and check the downstream for that reservation.');
  end if;
  v_detail := jsonb_build_object('asserted', resolve.outcome, 'reason', resolve.reason, 'evidence', resolve.evidence,
    'dead_letter_reason', v_op.dead_letter_reason, 'xact', pg_current_xact_id()::text,
    'expected_attempt', resolve.expected_attempt, 'expected_status', resolve.expected_status);

  if v_op.status in ('completed', 'failed') then
    -- Final already (a late success, or another resolution, came first): nothing changes; the
    -- assertion is kept as evidence.
    v_res.outcome := 'already_final';
    v_res.reason := case
      when v_op.status::text = resolve.outcome
           and (v_op.status = 'failed' or v_op.result = resolve.result) then 'matches'
      else 'differs' end;
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'already_final',
      v_op.attempt, v_before, v_before, session_user::text, v_detail || jsonb_build_object('presented',
        settle_private._presented(resolve.fingerprint, null, null, null,
          case resolve.outcome when 'completed' then 'result' else 'error' end, coalesce(resolve.result, resolve.error))));
    return row(v_res.outcome, v_res.reason, v_op.status, v_before, v_op.attempt, v_op.settled_attempt, v_op.result,
               v_op.error)::settle.resolve_result;
  end if;
  if v_op.attempt <> resolve.expected_attempt
     or (resolve.expected_status is not null and v_op.status <> resolve.expected_status) then
    -- The evidence was read before the operation moved on (a newer attempt, which may have taken
    -- effect after the check; or another status): it cannot judge what it did not see.
    perform settle_private._raise('SE053', format('resolve refused: the operation moved on since the evidence was read (attempt %s, status %s; expected attempt %s%s)',
        v_op.attempt, v_op.status, resolve.expected_attempt,
        case when resolve.expected_status is null then '' else ', status ' || resolve.expected_status end),
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'attempt', v_op.attempt, 'status', v_op.status,
                         'expected_attempt', resolve.expected_attempt, 'expected_status', resolve.expected_status),
      'Read the operation again (settle.inspect), check the downstream again for every attempt up to the current one, and resolve with what you read then.');
  end if;
  if v_op.status not in ('unknown', 'conflict') then
    perform settle_private._raise('SE050', format('only an unknown or conflict operation can be resolved (status %s)', v_op.status),
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'status', v_op.status),
      'A pending or running operation has not lost an outcome yet: let its attempt report, or its lease lapse (settle.expire_leases).');
  end if;
  if resolve.outcome = 'failed' and v_op.lease_token is not null then
    perform settle_private._raise('SE051', 'a failed resolution is refused while an attempt holds a lease',
      jsonb_build_object('tenant', resolve.tenant, 'key', resolve.key, 'attempt', v_op.attempt,
                         'lease_expires_at', v_op.lease_expires_at),
      'That attempt may still take effect: wait for it to report, or for its lease to lapse and settle.expire_leases to end it.');
  end if;

  if resolve.outcome = 'completed' then
    v_attempt := v_op.attempt + 1;
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'resolved', v_attempt,
      v_before, 'completed', session_user::text, v_detail);
    if v_op.lease_token is not null then
      -- The holder of a live (or lapsed) lease is over: the downstream says the effect happened.
      v_writes := v_writes + settle_private._end_attempt(resolve.tenant, resolve.key, v_op.attempt, v_now, 'settled_elsewhere');
    end if;
    -- The resolution's own attempt epoch (nobody holds its token; no claim log), once the
    -- record of the current attempt is kept, and the settlement through it, in one statement.
    -- (Drawn first: Citus refuses a volatile function in an UPDATE of a distributed table.)
    v_writes := v_writes + settle_private._record_attempt(resolve.tenant, resolve.key, v_op.attempt);
    v_seq := settle_private._next_seq(resolve.tenant, resolve.key);
    v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
    v_token := gen_random_uuid();
    v_worker := 'resolve:' || session_user::text;
    update settle_private.operations o
       set attempt = v_attempt, attempt_token = v_token, worker = v_worker, claimed_at = v_now, claimed_by = session_user,
           claim_seq = null, claim_audit_id = null, claim_status_before = null, claim_status_after = null,
           max_attempts = greatest(o.max_attempts, v_attempt), lease_token = null, lease_expires_at = null,
           status = 'completed', result = resolve.result, settled_attempt = v_attempt, settled_at = v_now,
           settled_seq = v_seq, settled_audit_id = v_audit_id, settled_status_before = v_before,
           settled_reason = 'resolved', settled_by = session_user,
           dead_lettered_at = null, dead_letter_reason = null, error = null, updated_at = v_now
     where o.tenant = resolve.tenant and o.key = resolve.key
    returning * into v_op;
  else
    -- The current attempt's record first (the verdict is written on records).
    v_writes := v_writes + settle_private._record_attempt(resolve.tenant, resolve.key, v_op.attempt);
    -- The verdict on every attempt without a terminal observation, kept in the audit row too.
    select coalesce(jsonb_agg(jsonb_build_object('attempt', a.attempt, 'observation', a.observation) order by a.attempt),
                    '[]'::jsonb)
      into v_open
      from settle_private.attempts a
     where a.tenant = resolve.tenant and a.key = resolve.key and (a.observation is null or a.observation = 'unknown');
    v_writes := v_writes + settle_private._audit(resolve.tenant, resolve.key, v_now, 'resolve', 'resolved', v_op.attempt,
      v_before, 'failed', session_user::text, v_detail || jsonb_build_object('attempts_judged', v_open));
    update settle_private.attempts a
       set observation = 'failed', observed_at = v_now, retryable = false,
           error = jsonb_build_object('code', 'resolved_failed', 'resolved_by', session_user::text, 'reason', resolve.reason,
                                      'error', resolve.error),
           ended_at = coalesce(a.ended_at, v_now), end_reason = coalesce(a.end_reason, 'observed')
     where a.tenant = resolve.tenant and a.key = resolve.key and (a.observation is null or a.observation = 'unknown');
    update settle_private.operations o
       set status = 'failed', error = resolve.error, dead_lettered_at = null, dead_letter_reason = null,
           updated_at = v_now
     where o.tenant = resolve.tenant and o.key = resolve.key
    returning * into v_op;
  end if;
  delete from settle_private.reconciliation_leases l where l.tenant = resolve.tenant and l.key = resolve.key;

  return row('resolved', null, v_op.status, v_before, v_op.attempt, v_op.settled_attempt, v_op.result,
             v_op.error)::settle.resolve_result;
end
$_$;

ALTER FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status) OWNER TO settle_owner;

--
-- Name: FUNCTION resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status) IS 'Record the verified outcome of an operation that lost it (status unknown or conflict, dead-lettered or not), after checking the downstream system: the way out of needs_reconciliation.
Parameters: tenant, key; fingerprint (the reservation''s, from settle.inspect: a key purged and claimed again is refused); expected_attempt (required: the attempt the checked evidence concerns, read with the operation; a newer attempt is refused); expected_status (optional: the status read with it; another status is refused); outcome completed (with result, <= 1 MiB: what the downstream reports) or failed (with error, <= 64 KiB: an explicit assertion that no attempt took effect); reason (required, 1-1024 bytes: why, the ticket); evidence (optional jsonb, <= 64 KiB).
Outcomes: resolved (completed: settled through an attempt epoch of its own, N+1, worker resolve:<session_user>, settled_reason resolved; a held lease ends settled_elsewhere; failed: every attempt without a terminal observation records the verdict failed (not retryable), so a late success of one is already_settled and never a second final outcome) | already_final (completed or failed already, e.g. a late success came first: nothing changes; reason matches or differs; the assertion is kept in the audit log).
Every call writes one settle.audit_log row (event resolve) with session_user, reason, evidence and the statuses; the dead letter is cleared, so retention applies again.
SQLSTATEs: SE001, SE002, SE004 (fingerprint format), SE005 (result), SE006 (error), SE008 (outcome, reason, evidence, result with failed or error with completed); SE010 not found; SE013 tenant not granted to this login role; SE050 status pending or running; SE051 failed while an attempt holds a lease; SE052 fingerprint is not the reservation''s; SE053 the operation moved on since the evidence was read (its attempt is not expected_attempt, or its status not expected_status).
Locking: the operation row (FOR UPDATE), as every writer: racing a late success or a redrive, exactly one goes first and the other sees its outcome.
Idempotency: a repeat answers already_final (reason matches) and changes nothing but the audit log (already_final is answered before the precondition is compared).';

--
-- Name: revoke_binding(text, text, bigint); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.revoke_binding(tenant text, principal text, below_generation bigint) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_previous bigint;
  v_floor bigint;
begin
  perform settle_private._check_name(revoke_binding.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  perform settle_private._check_name(revoke_binding.principal, 'principal', settle_private._limit('principal_bytes'), 'SE003');
  if not settle_private._tenant_ok(revoke_binding.tenant) then
    perform settle_private._refuse_tenant(revoke_binding.tenant, null, 'revoke_binding');
  end if;
  if revoke_binding.below_generation is null or revoke_binding.below_generation < 1 then
    perform settle_private._raise('SE008', 'below_generation must be a positive binding generation',
      jsonb_build_object('field', 'below_generation'),
      'Pass the first generation that stays valid (the one the principal re-authenticated with).');
  end if;
  select f.below_generation into v_previous from settle_private.binding_floors f
   where f.tenant = revoke_binding.tenant and f.principal = revoke_binding.principal
   for update;
  insert into settle_private.binding_floors as f (tenant, principal, below_generation, revoked_at)
  values (revoke_binding.tenant, revoke_binding.principal, revoke_binding.below_generation, v_now)
  on conflict on constraint binding_floors_pkey do update
     set below_generation = greatest(f.below_generation, excluded.below_generation),
         revoked_at = case when excluded.below_generation > f.below_generation then excluded.revoked_at else f.revoked_at end
  returning f.below_generation into v_floor;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'revoke_binding', session_user::text,
          jsonb_build_object('tenant', revoke_binding.tenant, 'principal', revoke_binding.principal,
                             'below_generation', revoke_binding.below_generation, 'previous', v_previous, 'floor', v_floor));
  return v_floor;
end
$$;

ALTER FUNCTION settle.revoke_binding(tenant text, principal text, below_generation bigint) OWNER TO settle_owner;

--
-- Name: FUNCTION revoke_binding(tenant text, principal text, below_generation bigint); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.revoke_binding(tenant text, principal text, below_generation bigint) IS 'Admin: revoke every binding generation of a principal in a tenant below a floor, after re-authentication; the reservation locks stay immutable.
Parameters: tenant, principal (as settle.claim), below_generation (>= 1: the first generation that stays valid).
Outcomes: the floor in force (floors only rise: a lower value keeps the higher floor). From the commit on, a claim presenting a revoked generation answers refused (binding_revoked), an observation or heartbeat fenced (binding_revoked, its payload kept in the audit log), a get refused; an operation reserved under a revoked generation that is not completed can no longer complete and moves to conflict (error binding_revoked) at its next touch (claim, observation, heartbeat or get of its key).
SQLSTATEs: SE001 (tenant), SE003 (principal), SE008 (below_generation), SE013 (the caller is bound to other tenants), 42501 (not settle_admin).
Locking: the floor row. Logged in settle.admin_log. Idempotency: idempotent; the caller''s safe path is in docs/protocol.md section 13.';

--
-- Name: revoke_tenant(text, text); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.revoke_tenant(role text, tenant text) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_mine text[] := settle_private._visible_tenants();
  v_oids oid[];
  v_tenants text[];
begin
  if revoke_tenant.role is null then
    perform settle_private._raise('SE008', 'role must not be null', jsonb_build_object('field', 'role'), null);
  end if;
  if revoke_tenant.tenant is not null then
    perform settle_private._check_name(revoke_tenant.tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  end if;
  if v_mine is not null then
    if revoke_tenant.tenant is null then
      perform settle_private._refuse_bound('revoke_tenant', jsonb_build_object('target_role', revoke_tenant.role));
    elsif not (revoke_tenant.tenant = any (v_mine)) then
      perform settle_private._refuse_tenant(revoke_tenant.tenant, null, 'revoke_tenant');
    end if;
    perform settle_private._check_role_within(revoke_tenant.role, v_mine, 'revoke_tenant');
  end if;
  select array_agg(r.role_oid) into v_oids from settle_private._binding_rows_of(revoke_tenant.role) r;
  if revoke_tenant.tenant is null then
    delete from settle_private.tenant_bindings b where b.role_oid = any (v_oids);
    v_tenants := null;
  else
    update settle_private.tenant_bindings b
       set tenants = array_remove(b.tenants, revoke_tenant.tenant), updated_at = v_now
     where b.role_oid = any (v_oids);
    -- What the role reaches now: the tenants every row of its lists (NULL: it has none).
    select case when count(*) > 0 then
             array(select distinct u.t from settle_private.tenant_bindings b1, unnest(b1.tenants) as u(t)
                    where b1.role_oid = any (v_oids)
                      and not exists (select 1 from settle_private.tenant_bindings b2
                                       where b2.role_oid = any (v_oids) and not (u.t = any (b2.tenants)))
                    order by 1) end
      into v_tenants
      from settle_private.tenant_bindings b where b.role_oid = any (v_oids);
  end if;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'revoke_tenant', session_user::text,
          jsonb_build_object('role', revoke_tenant.role, 'tenant', revoke_tenant.tenant, 'tenants', v_tenants));
  return v_tenants;
end
$$;

ALTER FUNCTION settle.revoke_tenant(role text, tenant text) OWNER TO settle_owner;

--
-- Name: FUNCTION revoke_tenant(role text, tenant text); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.revoke_tenant(role text, tenant text) IS 'Admin: take a tenant away from a login role, or unbind the role.
Parameters: role (a login role, or the name of a dropped one whose binding is left); tenant (NULL: remove the whole binding, which makes the role a trusted multi-tenant service again).
Outcomes: the tenants the role may reach now; an empty array when the last one was revoked: the role stays bound and is refused everywhere (fail closed, never widened by a revocation); NULL when the role is unbound (or never was bound).
SQLSTATEs: SE001 (tenant), SE008 (role NULL), SE013 (the caller is bound and tenant is not one of its tenants), SE019 (the caller is bound: unbinding, or a role that reaches other tenants), 42501 (not settle_admin).
Locking: the role''s binding rows. Logged in settle.admin_log. In force for every call that starts after the commit; a call already running finishes under the grants it read.
Idempotency: revoking what the role does not hold changes nothing but the log.';

--
-- Name: run_upkeep(text, boolean); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.run_upkeep(job text DEFAULT NULL::text, force boolean DEFAULT false) RETURNS SETOF settle.upkeep_run
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_job settle_private.upkeep_jobs;
  v_name text;
  v_now timestamptz;
  v_detail jsonb;
  v_expired settle.expire_result;
  v_total_expired integer;
  v_total_dead integer;
  v_purged integer;
  v_total_purged integer;
  v_trimmed integer;
  v_total_trimmed integer;
  v_in_doubt integer;
  v_total_in_doubt integer;
  v_retention interval;
  v_rounds integer;
  v_batch constant integer := 1000;
  v_trim_batch constant integer := 10000;
  v_max_rounds constant integer := 20;
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('run_upkeep', '{}'::jsonb);
  end if;
  if run_upkeep.job is not null and run_upkeep.job not in ('expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed') then
    perform settle_private._raise('SE008', 'job must be expire_leases, dead_letter_in_doubt, purge or trim_feed (or NULL for all four)',
      jsonb_build_object('field', 'job'), null);
  end if;
  -- expire_leases first: a lapsed lease it ends makes its operation touched now, so an
  -- operation is never dead-lettered as abandoned in the run that found its caller's lease lapsed.
  foreach v_name in array array['expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed'] loop
    continue when run_upkeep.job is not null and run_upkeep.job <> v_name;
    v_now := clock_timestamp();
    -- The job row's lock is the leader election: a second caller skips a job being run.
    select * into v_job from settle_private.upkeep_jobs j where j.job = v_name for update skip locked;
    if not found then
      return next row(v_name, 'busy', null)::settle.upkeep_run;
      continue;
    end if;
    if not run_upkeep.force and v_job.last_started_at is not null and v_job.last_started_at + v_job.every > v_now then
      return next row(v_name, 'not_due', jsonb_build_object('next_due_at', v_job.last_started_at + v_job.every))::settle.upkeep_run;
      continue;
    end if;
    begin
      v_rounds := 0;
      if v_name = 'expire_leases' then
        v_total_expired := 0;
        v_total_dead := 0;
        loop
          v_expired := settle.expire_leases(v_batch);
          v_total_expired := v_total_expired + v_expired.expired;
          v_total_dead := v_total_dead + v_expired.dead_lettered;
          v_rounds := v_rounds + 1;
          exit when v_expired.expired < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('expired', v_total_expired, 'dead_lettered', v_total_dead);
      elsif v_name = 'dead_letter_in_doubt' then
        select s.value into v_retention from settle_private.settings s where s.name = 'in_doubt_after';
        v_total_in_doubt := 0;
        loop
          v_in_doubt := settle.dead_letter_in_doubt(v_retention, v_batch);
          v_total_in_doubt := v_total_in_doubt + v_in_doubt;
          v_rounds := v_rounds + 1;
          exit when v_in_doubt < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('dead_lettered', v_total_in_doubt, 'in_doubt_after', v_retention::text);
      elsif v_name = 'trim_feed' then
        -- Feed events every registered consumer has acknowledged (settle.trim_feed, 00013): an
        -- event some consumer still has to read stays, whatever its age.
        v_total_trimmed := 0;
        loop
          v_trimmed := settle.trim_feed(v_trim_batch);
          v_total_trimmed := v_total_trimmed + v_trimmed;
          v_rounds := v_rounds + 1;
          exit when v_trimmed < v_trim_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('trimmed', v_total_trimmed);
      else
        select s.value into v_retention from settle_private.settings s where s.name = 'retention';
        v_total_purged := 0;
        loop
          v_purged := settle.purge(v_retention, v_batch);
          v_total_purged := v_total_purged + v_purged;
          v_rounds := v_rounds + 1;
          exit when v_purged < v_batch or v_rounds >= v_max_rounds;
        end loop;
        v_detail := jsonb_build_object('purged', v_total_purged, 'retention', v_retention::text);
      end if;
      update settle_private.upkeep_jobs j
         set last_started_at = v_now, last_finished_at = clock_timestamp(), last_ok = true, last_detail = v_detail,
             last_error = null, last_by = session_user::text, runs = j.runs + 1
       where j.job = v_name;
      return next row(v_name, 'ran', v_detail)::settle.upkeep_run;
    exception when others then
      -- The job's work rolls back; its failure is recorded (and stats shows it).
      v_detail := jsonb_build_object('sqlstate', sqlstate, 'error', sqlerrm);
      update settle_private.upkeep_jobs j
         set last_started_at = v_now, last_finished_at = clock_timestamp(), last_ok = false, last_detail = v_detail,
             last_error = sqlerrm, last_by = session_user::text, runs = j.runs + 1, failures = j.failures + 1
       where j.job = v_name;
      return next row(v_name, 'failed', v_detail)::settle.upkeep_run;
    end;
  end loop;
end
$$;

ALTER FUNCTION settle.run_upkeep(job text, force boolean) OWNER TO settle_owner;

--
-- Name: FUNCTION run_upkeep(job text, force boolean); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.run_upkeep(job text, force boolean) IS 'Run the upkeep jobs that are due: expire_leases (settle.expire_leases until a batch is not full, at most 20 batches of 1000), dead_letter_in_doubt (settle.dead_letter_in_doubt with the stored in_doubt_after, same bounds: operations that may have taken effect and that nobody touched since become dead letters needing reconciliation), purge (settle.purge with the stored retention, same bounds) and trim_feed (settle.trim_feed until a batch is not full, at most 20 batches of 10000; never an event a registered consumer has not acknowledged). What pg_cron or `pg-settle maintain` call (docs/operations.md "Upkeep").
Parameters: job (expire_leases, dead_letter_in_doubt, purge, trim_feed, or NULL for all); force (run even if not due, default false).
Outcomes: one row per job: ran (detail: counts) | failed (detail: sqlstate, error; the job''s work is rolled back, the failure recorded) | not_due (ran less than its interval ago) | busy (another caller holds the job: leader election by the job row''s lock, SKIP LOCKED). Each run is recorded in settle.upkeep.
SQLSTATEs: SE008 (unknown job), SE019 (a login bound to tenants: upkeep is engine-wide).
Locking: the job''s row in settle_private.upkeep_jobs for the run (FOR UPDATE SKIP LOCKED), then the locks of expire_leases, dead_letter_in_doubt, purge and trim_feed. Idempotency: safe to call from several processes at once and repeatedly.';

--
-- Name: set_in_doubt_after(interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.set_in_doubt_after(older_than interval) RETURNS interval
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_before interval;
  v_now timestamptz := clock_timestamp();
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_in_doubt_after', '{}'::jsonb);
  end if;
  if older_than is null or not settle_private._exact(older_than)
     or older_than not between interval '1 second' and interval '30 days' then
    perform settle_private._raise('SE008', 'older_than must be an exact duration between 1 second and 30 days',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  select s.value into v_before from settle_private.settings s where s.name = 'in_doubt_after' for update;
  insert into settle_private.settings as s (name, value, updated_at)
  values ('in_doubt_after', older_than, v_now)
  on conflict on constraint settings_pkey do update set value = excluded.value, updated_at = excluded.updated_at;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'set_in_doubt_after', session_user::text, jsonb_build_object('before', v_before::text, 'after', older_than::text));
  return older_than;
end
$$;

ALTER FUNCTION settle.set_in_doubt_after(older_than interval) OWNER TO settle_owner;

--
-- Name: FUNCTION set_in_doubt_after(older_than interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.set_in_doubt_after(older_than interval) IS 'Set how long an operation that may have taken effect (unknown, conflict, or pending after a lapsed lease) may stay untouched, with no lease and budget left, before the dead_letter_in_doubt upkeep job dead-letters it needs_reconciliation for the reconciler (default 15 minutes). Longer than your callers'' retry horizon: a caller that comes back later is answered unknown (dead-lettered).
Parameters: older_than, an exact duration between 1 second and 30 days.
Outcomes: the new age; logged in settle.admin_log (event set_in_doubt_after, before and after).
SQLSTATEs: SE008 (bad duration), SE019 (a login bound to tenants). Locking: the settings row. Idempotency: setting the same value again changes nothing but the log.';

--
-- Name: set_purge_min_retention(interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.set_purge_min_retention(min_retention interval) RETURNS interval
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.set_purge_min_retention(min_retention interval) OWNER TO settle_owner;

--
-- Name: FUNCTION set_purge_min_retention(min_retention interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.set_purge_min_retention(min_retention interval) IS 'Set the shortest retention settle.purge accepts (default 24 hours).
Parameters: min_retention, a non-negative exact duration (no month or year part).
Outcomes: the new minimum; the change is logged in settle.admin_log (event set_purge_min_retention, before and after). settle.purge with older_than below it raises SE014.
SQLSTATEs: SE008 (bad min_retention), SE019 (the caller is bound to tenants: engine-wide settings are for unbound admins). Locking: the settings row (FOR UPDATE). Idempotency: setting the same value again changes nothing but the log.';

--
-- Name: set_retention(interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.set_retention(older_than interval) RETURNS interval
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_before interval;
  v_min interval;
  v_now timestamptz := clock_timestamp();
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_retention', '{}'::jsonb);
  end if;
  if older_than is null or older_than < interval '0' or not settle_private._exact(older_than) then
    perform settle_private._raise('SE008', 'older_than must be a non-negative exact duration (no month or year part)',
      jsonb_build_object('field', 'older_than'), null);
  end if;
  select s.value into v_min from settle_private.settings s where s.name = 'purge_min_retention';
  if older_than < coalesce(v_min, interval '24 hours') then
    perform settle_private._raise('SE014', 'older_than is shorter than the minimum retention',
      jsonb_build_object('older_than', older_than::text, 'purge_min_retention', coalesce(v_min, interval '24 hours')::text),
      'Keep longer, or lower the minimum explicitly: select settle.set_purge_min_retention(interval ''...'').');
  end if;
  select s.value into v_before from settle_private.settings s where s.name = 'retention' for update;
  insert into settle_private.settings as s (name, value, updated_at)
  values ('retention', older_than, v_now)
  on conflict on constraint settings_pkey do update set value = excluded.value, updated_at = excluded.updated_at;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (v_now, 'set_retention', session_user::text, jsonb_build_object('before', v_before::text, 'after', older_than::text));
  return older_than;
end
$$;

ALTER FUNCTION settle.set_retention(older_than interval) OWNER TO settle_owner;

--
-- Name: FUNCTION set_retention(older_than interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.set_retention(older_than interval) IS 'Set how long terminal (completed or failed, not dead-lettered) operations are kept before the purge upkeep job removes them (default 7 days). Unresolved operations are never purged.
Parameters: older_than, an exact duration not shorter than purge_min_retention (default 24 hours).
Outcomes: the new retention; logged in settle.admin_log (event set_retention, before and after).
SQLSTATEs: SE008 (bad duration), SE014 (shorter than purge_min_retention), SE019 (a login bound to tenants). Locking: the settings row. Idempotency: setting the same value again changes nothing but the log.';

--
-- Name: set_upkeep_interval(text, interval); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.set_upkeep_interval(job text, every interval) RETURNS interval
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_before interval;
begin
  -- Engine-wide: a login bound to tenants may not (SE019, 00007).
  if settle_private._visible_tenants() is not null then
    perform settle_private._refuse_bound('set_upkeep_interval', '{}'::jsonb);
  end if;
  if set_upkeep_interval.job is null or set_upkeep_interval.job not in ('expire_leases', 'dead_letter_in_doubt', 'purge', 'trim_feed') then
    perform settle_private._raise('SE008', 'job must be expire_leases, dead_letter_in_doubt, purge or trim_feed', jsonb_build_object('field', 'job'), null);
  end if;
  if every is null or not settle_private._exact(every) or every not between interval '1 second' and interval '1 day' then
    perform settle_private._raise('SE008', 'every must be an exact duration between 1 second and 1 day',
      jsonb_build_object('field', 'every'), null);
  end if;
  select j.every into v_before from settle_private.upkeep_jobs j where j.job = set_upkeep_interval.job for update;
  update settle_private.upkeep_jobs j set every = set_upkeep_interval.every where j.job = set_upkeep_interval.job;
  insert into settle_private.admin_log (at, event, actor, detail)
  values (clock_timestamp(), 'set_upkeep_interval', session_user::text,
          jsonb_build_object('job', set_upkeep_interval.job, 'before', v_before::text, 'after', every::text));
  return every;
end
$$;

ALTER FUNCTION settle.set_upkeep_interval(job text, every interval) OWNER TO settle_owner;

--
-- Name: FUNCTION set_upkeep_interval(job text, every interval); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.set_upkeep_interval(job text, every interval) IS 'Set how often an upkeep job is due (defaults: expire_leases 1 minute, dead_letter_in_doubt 1 minute, purge 1 hour, trim_feed 1 minute).
Parameters: job (expire_leases, dead_letter_in_doubt, purge or trim_feed), every (1 second - 1 day, exact).
Outcomes: the new interval; logged in settle.admin_log (event set_upkeep_interval).
SQLSTATEs: SE008, SE019 (a login bound to tenants). Locking: the job row (waits for a running job). Idempotency: repeatable.';

--
-- Name: trim_feed(integer); Type: FUNCTION; Schema: settle; Owner: settle_owner
--

CREATE FUNCTION settle.trim_feed(batch_size integer DEFAULT 10000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle.trim_feed(batch_size integer) OWNER TO settle_owner;

--
-- Name: FUNCTION trim_feed(batch_size integer); Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON FUNCTION settle.trim_feed(batch_size integer) IS 'Feed retention: delete events every registered consumer has acknowledged (at or below the lowest lane position); with no consumer registered, every event below the horizon.
Parameters: batch_size (1-100000, default 10000); call again while it returns a full batch.
Outcomes: the number of events deleted. An event a registered consumer has not acknowledged is never deleted, by this or by settle.purge (which deletes operations, never feed events).
SQLSTATEs: SE008 (batch_size), SE019 (a tenant-bound login: retention is engine-wide).
Locking: no lane row (a consumer holding its batch in an open transaction never makes it wait); a shared advisory lock that register_consumer and reset_consumer take exclusively, so a lane moved back waits for a trim in progress and the next trim sees it. Idempotency: safe to repeat and to run concurrently.';

--
-- Name: _access(text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._access(tenant text, principal text) RETURNS bigint
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_verdict bigint;
begin
  select case when exists (select 1 from settle_private.tenant_bindings b
                            where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (_access.tenant = any (b.tenants))) then -1
              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _access.tenant and f.principal = _access.principal), 0) end
    into v_verdict;
  return v_verdict;
end
$$;

ALTER FUNCTION settle_private._access(tenant text, principal text) OWNER TO settle_owner;

--
-- Name: _audit(text, text, timestamp with time zone, text, text, integer, settle.status, settle.status, text, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._audit(tenant text, key text, at timestamp with time zone, event text, outcome text, attempt integer, status_before settle.status, status_after settle.status, actor text, detail jsonb) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_seq bigint;
  v_digest bytea;
begin
  -- A refusal that moved the status (a mismatched success moves it to conflict, a revoked
  -- reservation is converted) is a transition: always a row of its own, never only counted.
  if _audit.outcome in ('refused', 'fenced', 'conflict') and _audit.status_before is not distinct from _audit.status_after
     and (exists (select 1 from settle_private.audit_overflow x where x.tenant = _audit.tenant and x.key = _audit.key)
          or (select count(*) from (select 1 from settle_private.audit_log l
                                     where l.tenant = _audit.tenant and l.key = _audit.key
                                       and l.outcome in ('refused', 'fenced', 'conflict')
                                     limit settle_private._limit('refusal_rows')) r) >= settle_private._limit('refusal_rows')) then
    -- Computed first: Citus allows only IMMUTABLE functions in ON CONFLICT DO UPDATE.
    v_digest := sha256(convert_to(coalesce(_audit.detail::text, ''), 'UTF8'));
    insert into settle_private.audit_overflow as x
      (tenant, key, refusals, first_at, last_at, last_event, last_outcome, last_login, last_actor, digest)
    values
      (_audit.tenant, _audit.key, 1, _audit.at, _audit.at, _audit.event, _audit.outcome, session_user::text, _audit.actor, v_digest)
    on conflict on constraint audit_overflow_pkey do update
       set refusals = x.refusals + 1, last_at = greatest(x.last_at, excluded.last_at), last_event = excluded.last_event,
           last_outcome = excluded.last_outcome, last_login = excluded.last_login, last_actor = excluded.last_actor,
           digest = sha256(x.digest || excluded.digest);
    return 1;
  end if;
  -- Two statements, not one INSERT ... SELECT: Citus refuses that inside the maintenance steps
  -- it delegates from a query on a shard (_expire_key, _purge_key).
  v_seq := settle_private._next_seq(_audit.tenant, _audit.key);
  insert into settle_private.audit_log
    (tenant, key, seq, at, event, outcome, attempt, status_before, status_after, actor, detail, login)
  values
    (_audit.tenant, _audit.key, v_seq, _audit.at, _audit.event, _audit.outcome, _audit.attempt,
     _audit.status_before, _audit.status_after, _audit.actor, _audit.detail, session_user::text);
  return 1;
end
$$;

ALTER FUNCTION settle_private._audit(tenant text, key text, at timestamp with time zone, event text, outcome text, attempt integer, status_before settle.status, status_after settle.status, actor text, detail jsonb) OWNER TO settle_owner;

--
-- Name: _binding_ascii_ok(text, text[], bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._binding_ascii_ok(principal text, scopes text[], binding_generation bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select settle_private._name_ascii_ok(principal, settle_private._limit('principal_bytes'))
     and binding_generation >= 0
     and (scopes = '{}'::text[]
          or (scopes = array[scopes[1]] and settle_private._name_ascii_ok(scopes[1], settle_private._limit('scope_bytes'))))
$$;

ALTER FUNCTION settle_private._binding_ascii_ok(principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: _binding_ok(text, text[], bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._binding_ok(principal text, scopes text[], binding_generation bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select settle_private._name_ok(principal, settle_private._limit('principal_bytes'))
     and binding_generation >= 0
     and scopes is not null
     and cardinality(scopes) <= settle_private._limit('max_scopes')
     and (cardinality(scopes) = 0
          or (array_ndims(scopes) = 1 and array_lower(scopes, 1) = 1
              -- One printable ASCII scope (the usual case) passes without the loop of _scopes_ok.
              and ((cardinality(scopes) = 1 and octet_length(scopes[1]) <= settle_private._limit('scope_bytes')
                    and scopes[1] ~ '^[!-~]([ -~]*[!-~])?$')
                   or settle_private._scopes_ok(scopes))))
$_$;

ALTER FUNCTION settle_private._binding_ok(principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: _binding_rows_of(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._binding_rows_of(role text) RETURNS TABLE(role_oid oid, tenants text[])
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_oid oid := (select r.oid from pg_catalog.pg_roles r where r.rolname = _binding_rows_of.role);
  -- The catalog is read into variables, never joined into a statement on the bindings: on Citus
  -- they are a reference table and the statement would be sent to every node with pg_roles
  -- expanded to pg_authid ("permission denied for table pg_authid").
  v_roles oid[] := array(select r.oid from pg_catalog.pg_roles r);
  v_b record;
  v_name text;
begin
  for v_b in select b.role_oid, b.role_name from settle_private.tenant_bindings b where b.role_oid = any (v_roles) loop
    v_name := (select r.rolname from pg_catalog.pg_roles r where r.oid = v_b.role_oid);
    if v_name <> v_b.role_name then
      update settle_private.tenant_bindings b set role_name = v_name where b.role_oid = v_b.role_oid;
    end if;
  end loop;
  return query
    select b.role_oid, b.tenants from settle_private.tenant_bindings b
     where b.role_oid = v_oid
        or (b.role_name = _binding_rows_of.role and not (b.role_oid = any (v_roles)))
     order by b.role_oid
     for update;
end
$$;

ALTER FUNCTION settle_private._binding_rows_of(role text) OWNER TO settle_owner;

--
-- Name: _canonical_json(jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._canonical_json(value jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
declare
  v_text text := value::text;
begin
  -- Without a '.', jsonb's rendering is already canonical (keys sorted, one space after
  -- ':' and ',', exponents expanded); only fractional numbers need the slow path.
  if position('.' in v_text) = 0 then
    return v_text;
  end if;
  return settle_private._canonical_json_slow(value);
end
$$;

ALTER FUNCTION settle_private._canonical_json(value jsonb) OWNER TO settle_owner;

--
-- Name: _canonical_json_slow(jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._canonical_json_slow(value jsonb) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  case jsonb_typeof(value)
    when 'object' then
      return '{' || coalesce((
        select string_agg(to_jsonb(e.k)::text || ': ' || settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_each(value) with ordinality as e(k, v, n)), '') || '}';
    when 'array' then
      return '[' || coalesce((
        select string_agg(settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_array_elements(value) with ordinality as e(v, n)), '') || ']';
    when 'number' then
      return trim_scale(value::numeric)::text;
    else
      return value::text;
  end case;
end
$$;

ALTER FUNCTION settle_private._canonical_json_slow(value jsonb) OWNER TO settle_owner;

--
-- Name: _check_batch_bytes(text, bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_batch_bytes(field text, bytes bigint) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_max constant integer := settle_private._limit('max_batch_bytes');
begin
  if bytes > v_max then
    perform settle_private._raise('SE064', format('a batch''s %s hold at most %s bytes of JSON text together (got %s)',
      field, v_max, bytes),
      jsonb_build_object('field', field, 'max_bytes', v_max, 'bytes', bytes),
      'Split the keys into smaller batches: each call''s ' || field || ' at most max_batch_bytes together.');
  end if;
end
$$;

ALTER FUNCTION settle_private._check_batch_bytes(field text, bytes bigint) OWNER TO settle_owner;

--
-- Name: _check_batch_element(text, bigint, text, text, jsonb, text, text[], bigint, interval, text, integer, integer, uuid, text, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_batch_element(kind text, ordinal bigint, tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, attempt integer, lease_token uuid, fingerprint text, result jsonb) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_state text;
  v_message text;
  v_detail text;
  v_hint text;
begin
  begin
    if kind = 'claim' then
      perform settle_private._check_claim_args(tenant, key, request, principal, scopes, binding_generation, lease,
        worker, max_attempts);
    else
      perform settle_private._check_observation('complete', tenant, key, attempt, lease_token, fingerprint,
        principal, scopes, binding_generation, result, null, null);
    end if;
  exception when others then
    get stacked diagnostics v_state = returned_sqlstate, v_message = message_text, v_detail = pg_exception_detail,
      v_hint = pg_exception_hint;
    raise exception using errcode = v_state, message = format('element %s: %s', ordinal, v_message),
      detail = (coalesce(nullif(v_detail, '')::jsonb, '{}'::jsonb) || jsonb_build_object('ordinal', ordinal))::text,
      hint = coalesce(v_hint, '');
  end;
end
$$;

ALTER FUNCTION settle_private._check_batch_element(kind text, ordinal bigint, tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, attempt integer, lease_token uuid, fingerprint text, result jsonb) OWNER TO settle_owner;

--
-- Name: _check_batch_shape(text[], integer[], integer[], integer[], bigint[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_batch_shape(names text[], cardinalities integer[], dims integer[], lowers integer[], first_nulls bigint[]) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_n integer := cardinalities[1];
  v_max constant integer := settle_private._limit('max_batch_keys');
begin
  for i in 1 .. cardinality(names) loop
    if cardinalities[i] is null then
      perform settle_private._raise('SE063', format('%s must not be NULL', names[i]),
        jsonb_build_object('field', names[i]), 'Pass an array with one element per key.');
    end if;
  end loop;
  if v_n = 0 then
    perform settle_private._raise('SE061', 'a batch needs at least one key',
      jsonb_build_object('field', names[1]), 'Call with one or more keys (or skip the call: an empty batch settles nothing).');
  end if;
  if v_n > v_max then
    perform settle_private._raise('SE060', format('a batch holds at most %s keys (got %s)', v_max, v_n),
      jsonb_build_object('field', names[1], 'max_keys', v_max, 'keys', v_n),
      'Split the keys into batches of at most max_batch_keys.');
  end if;
  for i in 1 .. cardinality(names) loop
    if dims[i] <> 1 or lowers[i] <> 1 or cardinalities[i] <> v_n then
      perform settle_private._raise('SE062', format('%s must be a one-dimensional array indexed from 1 with one element per key (%s keys, got %s)',
        names[i], v_n, cardinalities[i]),
        jsonb_build_object('field', names[i], 'keys', v_n, 'elements', cardinalities[i], 'dimensions', dims[i], 'lower_bound', lowers[i]),
        'Pass the per-key arrays in the order of keys, one element each.');
    end if;
  end loop;
  for i in 1 .. cardinality(names) loop
    if first_nulls[i] is not null then
      perform settle_private._raise('SE063', format('%s[%s] must not be NULL', names[i], first_nulls[i]),
        jsonb_build_object('field', names[i], 'ordinal', first_nulls[i]), null);
    end if;
  end loop;
end
$$;

ALTER FUNCTION settle_private._check_batch_shape(names text[], cardinalities integer[], dims integer[], lowers integer[], first_nulls bigint[]) OWNER TO settle_owner;

--
-- Name: _check_binding(text, text[], bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_binding(principal text, scopes text[], binding_generation bigint) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_scope text;
  v_max_scopes integer := settle_private._limit('max_scopes');
begin
  perform settle_private._check_name(principal, 'principal', settle_private._limit('principal_bytes'), 'SE003');
  -- Scopes are a set of names: a one-dimensional array indexed from 1 ('{{a}}' or '[0:0]={a}'
  -- would compare unequal to '{a}' as arrays; refused rather than flattened).
  if scopes is not null and cardinality(scopes) > 0 and (array_ndims(scopes) <> 1 or array_lower(scopes, 1) <> 1) then
    perform settle_private._raise('SE003', 'scopes must be a one-dimensional array indexed from 1',
      jsonb_build_object('field', 'scopes', 'dimensions', array_ndims(scopes), 'lower_bound', array_lower(scopes, 1)),
      'Pass a plain array such as ''{payments:write}''.');
  end if;
  if scopes is null or cardinality(scopes) > v_max_scopes or array_position(scopes, null) is not null then
    perform settle_private._raise('SE003', format('scopes must be a non-null array of at most %s non-null scopes', v_max_scopes),
      jsonb_build_object('field', 'scopes', 'max_items', v_max_scopes), 'Pass ''{}'' for no scopes.');
  end if;
  foreach v_scope in array scopes loop
    perform settle_private._check_name(v_scope, 'scope', settle_private._limit('scope_bytes'), 'SE003');
  end loop;
  if binding_generation is null or binding_generation < 0 then
    perform settle_private._raise('SE003', 'binding_generation must be a non-negative integer',
      jsonb_build_object('field', 'binding_generation'),
      'Use your token epoch, session version or delegation revision.');
  end if;
end
$$;

ALTER FUNCTION settle_private._check_binding(principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: _check_claim_args(text, text, jsonb, text, text[], bigint, interval, text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_claim_args(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform settle_private._check_operation_key(tenant, key);
  perform settle_private._check_binding(principal, scopes, binding_generation);
  perform settle_private._check_json(request, 'request', settle_private._limit('request_bytes'), 'SE004');
  perform settle_private._check_lease(lease);
  if worker is not null then
    perform settle_private._check_name(worker, 'worker', settle_private._limit('worker_bytes'), 'SE008');
  end if;
  perform settle_private._check_count(max_attempts, 'max_attempts', settle_private._limit('max_attempts'));
end
$$;

ALTER FUNCTION settle_private._check_claim_args(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) OWNER TO settle_owner;

--
-- Name: _check_count(integer, text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_count(value integer, field text, max integer) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if value is null or value not between 1 and max then
    perform settle_private._raise('SE008', format('%s must be between 1 and %s', field, max),
      jsonb_build_object('field', field), null);
  end if;
end
$$;

ALTER FUNCTION settle_private._check_count(value integer, field text, max integer) OWNER TO settle_owner;

--
-- Name: _check_json(jsonb, text, integer, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_json(value jsonb, field text, max_bytes integer, code text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if value is null then
    perform settle_private._raise(code, format('%s must not be null', field),
      jsonb_build_object('field', field), 'Pass a JSON value (JSON null is ''null''::jsonb).');
  elsif not settle_private._json_ok(value, max_bytes) then
    perform settle_private._raise(code, format('%s must be at most %s bytes of JSON text', field, max_bytes),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'Store large payloads elsewhere and settle a reference to them.');
  end if;
end
$$;

ALTER FUNCTION settle_private._check_json(value jsonb, field text, max_bytes integer, code text) OWNER TO settle_owner;

--
-- Name: _check_lease(interval); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_lease(lease interval) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if settle_private._lease_ok(lease) is not true then
    perform settle_private._raise('SE007', 'lease must be an exact duration (no month or year part) between 1 second and 1 day',
      jsonb_build_object('field', 'lease', 'min_ms', settle_private._limit('min_lease_ms'),
                         'max_ms', settle_private._limit('max_lease_ms')),
      'Renew long work with settle.heartbeat instead of a long lease.');
  end if;
end
$$;

ALTER FUNCTION settle_private._check_lease(lease interval) OWNER TO settle_owner;

--
-- Name: _check_login_role(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_login_role(role text) RETURNS oid
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_oid oid;
begin
  select r.oid into v_oid from pg_catalog.pg_roles r where r.rolname = _check_login_role.role and r.rolcanlogin;
  if v_oid is null then
    perform settle_private._raise('SE008', 'role must be an existing login role',
      jsonb_build_object('field', 'role', 'role', role),
      'Tenant grants bind the login role a service connects as (session_user), not a group role such as settle_app.');
  end if;
  return v_oid;
end
$$;

ALTER FUNCTION settle_private._check_login_role(role text) OWNER TO settle_owner;

--
-- Name: _check_name(text, text, integer, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_name(value text, field text, max_bytes integer, code text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_problem text;
begin
  if value is null then
    v_problem := 'must not be null';
  elsif settle_private._is_blank(value) then
    v_problem := 'must not be empty or whitespace only';
  elsif octet_length(value) > max_bytes then
    v_problem := format('must be at most %s bytes (got %s)', max_bytes, octet_length(value));
  elsif value ~ '[[:cntrl:]]' then
    v_problem := 'must not contain control characters';
  elsif value ~ '^[[:space:]]|[[:space:]]$' then
    v_problem := 'must not begin or end with white space';
  elsif value ~ ('[' || settle_private._lookalike_spaces() || ']') then
    v_problem := format('must not contain a space other than U+0020 or a blank pattern (found U+%s)',
      upper(lpad(to_hex(ascii(substring(value from '[' || settle_private._lookalike_spaces() || ']'))), 4, '0')));
  elsif value ~ ('[' || settle_private._invisible() || ']') then
    v_problem := format('must not contain default-ignorable or bidirectional-control code points (found U+%s)',
      upper(lpad(to_hex(ascii(substring(value from '[' || settle_private._invisible() || ']'))), 4, '0')));
  elsif not value is nfc normalized then
    v_problem := 'must be in Unicode normalization form NFC';
  end if;
  if v_problem is not null then
    perform settle_private._raise(code, format('%s %s', field, v_problem),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'See the input limits in docs/sql-api.md.');
  end if;
end
$_$;

ALTER FUNCTION settle_private._check_name(value text, field text, max_bytes integer, code text) OWNER TO settle_owner;

--
-- Name: _check_observation(text, text, text, integer, uuid, text, text, text[], bigint, jsonb, jsonb, boolean); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_observation(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
begin
  perform settle_private._check_observation_args(tenant, key, attempt, lease_token);
  if fingerprint is null or fingerprint !~ '^v[0-9]+:[0-9a-f]{64}$' then
    perform settle_private._raise('SE004', 'fingerprint must be the value returned by settle.claim',
      jsonb_build_object('field', 'fingerprint'), 'Pass the fingerprint from the acquired claim; never compute it.');
  end if;
  perform settle_private._check_binding(principal, scopes, binding_generation);
  if kind = 'complete' then
    perform settle_private._check_json(result, 'result', settle_private._limit('result_bytes'), 'SE005');
  elsif kind = 'fail' then
    perform settle_private._check_json(error, 'error', settle_private._limit('error_bytes'), 'SE006');
    if retryable is null then
      perform settle_private._raise('SE006', 'retryable must be true or false',
        jsonb_build_object('field', 'retryable'), null);
    end if;
  end if;
end
$_$;

ALTER FUNCTION settle_private._check_observation(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) OWNER TO settle_owner;

--
-- Name: _check_observation_args(text, text, integer, uuid); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_observation_args(tenant text, key text, attempt integer, lease_token uuid) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform settle_private._check_operation_key(tenant, key);
  if attempt is null or attempt < 1 then
    perform settle_private._raise('SE008', 'attempt must be a positive attempt epoch',
      jsonb_build_object('field', 'attempt'), 'Pass the attempt returned by settle.claim.');
  end if;
  if lease_token is null then
    perform settle_private._raise('SE008', 'lease_token must not be null',
      jsonb_build_object('field', 'lease_token'), 'Pass the lease_token returned by settle.claim.');
  end if;
end
$$;

ALTER FUNCTION settle_private._check_observation_args(tenant text, key text, attempt integer, lease_token uuid) OWNER TO settle_owner;

--
-- Name: _check_operation_key(text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_operation_key(tenant text, key text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  perform settle_private._check_name(tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  perform settle_private._check_name(key, 'key', settle_private._limit('key_bytes'), 'SE002');
end
$$;

ALTER FUNCTION settle_private._check_operation_key(tenant text, key text) OWNER TO settle_owner;

--
-- Name: _check_role_within(text, text[], text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._check_role_within(role text, mine text[], call text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if not exists (select 1 from settle_private._binding_rows_of(_check_role_within.role))
     or exists (select 1 from settle_private._binding_rows_of(_check_role_within.role) r where not (r.tenants <@ mine)) then
    perform settle_private._refuse_bound(call, jsonb_build_object('target_role', role));
  end if;
end
$$;

ALTER FUNCTION settle_private._check_role_within(role text, mine text[], call text) OWNER TO settle_owner;

--
-- Name: _claim_new_keys(text, text[], jsonb[], text, text[], bigint, interval, text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._claim_new_keys(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) RETURNS SETOF settle.claim_many_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_now timestamptz := clock_timestamp();
  v_expires timestamptz := settle_private._expiry(v_now, _claim_new_keys.lease);
  v_decided timestamptz;
  v_floor bigint;
  v_keys text[];
  v_tokens uuid[];
  v_fingerprints text[];
begin
  -- The operations, each with attempt 1 and the log of its claim, in the fixed order (each
  -- claim_audit_id drawn as settle.claim draws it, key after key; each claim placed in the key's
  -- history after any audit row of the key). An insert of a key that another session inserted
  -- and has not committed waits for that session, as settle.claim's does.
  with ins as (
    insert into settle_private.operations as o
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    select _claim_new_keys.tenant, u.k, settle_private._fingerprint(u.r), u.r, _claim_new_keys.principal,
           settle_private._normalize_scopes(_claim_new_keys.scopes), _claim_new_keys.binding_generation,
           _claim_new_keys.max_attempts, v_now, 1, u.t, _claim_new_keys.worker, v_now, session_user,
           (select coalesce(max(l.seq), 0) + 1 from settle_private.audit_log l
             where l.tenant = _claim_new_keys.tenant and l.key = u.k),
           nextval('settle_private.audit_log_audit_id_seq'), 'running', 'running', u.t, v_expires, v_now
      from (select x.k, x.r, gen_random_uuid() as t
              from unnest(_claim_new_keys.keys, _claim_new_keys.requests) x(k, r)
             order by x.k collate "C") u
    on conflict on constraint operations_pkey do nothing
    returning o.key, o.lease_token, o.fingerprint
  )
  select array_agg(ins.key order by ins.key collate "C"), array_agg(ins.lease_token order by ins.key collate "C"),
         array_agg(ins.fingerprint order by ins.key collate "C")
    into v_keys, v_tokens, v_fingerprints
    from ins;
  v_decided := clock_timestamp();
  if coalesce(cardinality(v_keys), 0) <> cardinality(_claim_new_keys.keys) then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  -- The insert may have waited (see above): decide again with what committed meanwhile. Access
  -- is read again after every insert, waited or not (one read per batch): a revocation that
  -- committed during a wait of any length sends the batch key by key, where each claim answers it.
  v_floor := settle_private._access(_claim_new_keys.tenant, _claim_new_keys.principal);
  if v_floor < 0 or _claim_new_keys.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  if v_decided > v_now + _claim_new_keys.lease / 10 then
    v_now := v_decided;
    v_expires := settle_private._expiry(v_now, _claim_new_keys.lease);
    update settle_private.operations o
       set lease_expires_at = v_expires, updated_at = v_now
     where o.tenant = _claim_new_keys.tenant and o.key = any (v_keys);
  end if;

  return query
    select u.i::integer, u.k, 'acquired'::text, 'running'::settle.status, 1, n.t, v_expires, null::integer,
           n.f, null::jsonb, null::integer, null::jsonb, null::boolean, null::text[], null::text, null::text
      from unnest(_claim_new_keys.keys) with ordinality u(k, i)
      join unnest(v_keys, v_tokens, v_fingerprints) n(k, t, f) on n.k = u.k
     order by u.i;
end
$$;

ALTER FUNCTION settle_private._claim_new_keys(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) OWNER TO settle_owner;

--
-- Name: _claim_refused(text, text, jsonb, text, text[], bigint, bigint, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._claim_refused(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, below bigint, as_of timestamp with time zone, worker text) RETURNS settle.claim_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
  v_res settle.claim_result;
begin
  select * into v_op from settle_private.operations o where o.tenant = _claim_refused.tenant and o.key = _claim_refused.key;
  perform settle_private._audit(tenant, key, as_of, 'claim', 'refused', null, v_op.status, v_op.status, worker,
    jsonb_build_object('reason', 'binding_revoked', 'below_generation', below,
      'presented', settle_private._presented(settle_private._fingerprint(request), principal, scopes,
                                             binding_generation, null, null)));
  v_res.outcome := 'refused';
  v_res.reason := 'binding_revoked';
  return v_res;
end
$$;

ALTER FUNCTION settle_private._claim_refused(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, below bigint, as_of timestamp with time zone, worker text) OWNER TO settle_owner;

--
-- Name: _complete_holders(text, text[], integer[], uuid[], text[], text, text[], bigint, jsonb[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._complete_holders(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) RETURNS SETOF settle.complete_many_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_now timestamptz;
  v_n integer := cardinality(_complete_holders.keys);
  v_locked integer;
  v_settled integer;
  v_keys text[];
  v_before settle.status[];
  v_claim_seqs bigint[];
  v_floor bigint;
begin
  -- The two statements that join the batch with the tables are run by EXECUTE, so that each is
  -- planned at every call with the batch's arrays and the tables' current sizes: a plan kept
  -- for the session from a young table (a hash join over a sequential scan of a few pages)
  -- stays after the table grew, and every batch then reads every row. Not plan_cache_mode =
  -- force_custom_plan on the function: that setting holds for the triggers the statements fire
  -- too, which then plan their statements again for every row (measured: a quarter of the
  -- batch's server CPU, bench/perf-profile.ts batch).
  -- Each key's row is looked up (and locked) by its primary key, one key after the other in
  -- the fixed order: the lateral subquery runs once per key of the sorted list.
  execute $q$
    select count(*), array_agg(x.key), array_agg(x.status), array_agg(x.claim_seq)
      from (select u.* from unnest($2, $3, $4, $5) u(k, a, t, f) order by u.k collate "C") u
     cross join lateral (
       select o.key, o.status, o.claim_seq from settle_private.operations o
        where o.tenant = $1 and o.key = u.k
          and o.attempt = u.a and o.lease_token = u.t and o.status <> 'completed' and o.fingerprint = u.f
          and o.principal = $6 and o.scopes = settle_private._normalize_scopes($7) and o.binding_generation = $8
          for update) x
  $q$ into v_locked, v_keys, v_before, v_claim_seqs
  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts, _complete_holders.lease_tokens,
        _complete_holders.fingerprints, _complete_holders.principal, _complete_holders.scopes,
        _complete_holders.binding_generation;
  if v_locked <> v_n then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;
  -- The locking read may have waited for another session's lock: access is judged again under the
  -- locks, as settle.complete judges it after its wait. A revoked binding or tenant sends the
  -- batch key by key, where each complete answers it (fenced, or SE013).
  v_floor := settle_private._access(_complete_holders.tenant, _complete_holders.principal);
  if v_floor < 0 or _complete_holders.binding_generation < v_floor then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;

  v_now := clock_timestamp();
  -- As settle.complete: each key's settlement and its log on the operation, its place in the
  -- key's history after its audit rows and the claim of its current attempt (the holder of the
  -- lease has reported nothing and has no record: nothing else is read); the settlements'
  -- audit ids drawn once each, in the fixed order, as settle.complete draws them key after key.
  execute $q$
    with s as materialized (
      select y.k, y.a, y.r, y.status_before, y.seq, nextval('settle_private.audit_log_audit_id_seq') as audit_id
        from (select u.k, u.a, u.r, b.status_before,
                     coalesce(greatest(
                       (select l.seq from settle_private.audit_log l where l.tenant = $1 and l.key = u.k
                         order by l.seq desc limit 1),
                       b.claim_seq), 0) + 1 as seq
                from unnest($2, $3, $4) u(k, a, r)
                join unnest($5, $6, $7) b(k, status_before, claim_seq) on b.k = u.k
               order by u.k collate "C") y
    ), op as (
      update settle_private.operations o
         set status = 'completed', result = s.r, settled_attempt = s.a, settled_at = $8, settled_seq = s.seq,
             settled_audit_id = s.audit_id, settled_status_before = s.status_before, settled_reason = 'current_attempt',
             settled_by = session_user, lease_token = null, lease_expires_at = null, dead_lettered_at = null,
             dead_letter_reason = null, error = null, updated_at = $8
        from s
       where o.tenant = $1 and o.key = s.k
      returning o.key
    )
    select count(*) from op
  $q$ into v_settled
  using _complete_holders.tenant, _complete_holders.keys, _complete_holders.attempts, _complete_holders.results,
        v_keys, v_before, v_claim_seqs, v_now;
  if v_settled <> v_n then
    raise sqlstate 'SE099' using message = 'the batch is decided key by key';
  end if;

  return query
    select u.i::integer, u.k, 'settled'::text, 'current_attempt'::text, 'completed'::settle.status, u.a, u.a, u.r,
           null::jsonb, null::text[], false, null::text
      from unnest(_complete_holders.keys, _complete_holders.attempts, _complete_holders.results)
           with ordinality u(k, a, r, i)
     order by u.i;
end
$_$;

ALTER FUNCTION settle_private._complete_holders(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) OWNER TO settle_owner;

--
-- Name: _conflict_on(text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._conflict_on(diff text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
  select case when diff <@ array['request'] then diff else array['binding'] end
$$;

ALTER FUNCTION settle_private._conflict_on(diff text[]) OWNER TO settle_owner;

--
-- Name: _dead_letter(settle_private.operations, timestamp with time zone, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._dead_letter(op settle_private.operations, as_of timestamp with time zone, error jsonb) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
begin
  if settle_private._may_have_taken_effect(op.tenant, op.key, op.status, op.attempt) then
    update settle_private.operations o
       set status = case when settle_private._rank(op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else op.status end,
           lease_token = null, lease_expires_at = null, dead_lettered_at = as_of,
           dead_letter_reason = 'needs_reconciliation', updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  else
    update settle_private.operations o
       set status = 'failed', lease_token = null, lease_expires_at = null, dead_lettered_at = as_of,
           dead_letter_reason = 'attempts_exhausted', error = _dead_letter.error, updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  end if;
  return v_op;
end
$$;

ALTER FUNCTION settle_private._dead_letter(op settle_private.operations, as_of timestamp with time zone, error jsonb) OWNER TO settle_owner;

--
-- Name: _dead_letter_in_doubt_key(text, text, timestamp with time zone, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._dead_letter_in_doubt_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
  v_after settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _dead_letter_in_doubt_key.tenant and o.key = _dead_letter_in_doubt_key.key
     and o.lease_token is null and o.dead_lettered_at is null
     and o.status in ('pending', 'unknown', 'conflict') and o.updated_at <= _dead_letter_in_doubt_key.cutoff
   for update skip locked;
  if not found or not settle_private._may_have_taken_effect(v_op.tenant, v_op.key, v_op.status, v_op.attempt) then
    return 0;
  end if;
  v_after := settle_private._dead_letter(v_op, _dead_letter_in_doubt_key.as_of, null);
  perform settle_private._audit(v_op.tenant, v_op.key, _dead_letter_in_doubt_key.as_of, 'expire', 'dead_lettered',
    v_op.attempt, v_op.status, v_after.status, _dead_letter_in_doubt_key.actor,
    jsonb_build_object('dead_letter_reason', v_after.dead_letter_reason, 'cause', 'in_doubt_abandoned',
                       'idle_since', v_op.updated_at, 'attempts', v_op.attempt, 'max_attempts', v_op.max_attempts));
  return 1;
end
$$;

ALTER FUNCTION settle_private._dead_letter_in_doubt_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _end_attempt(text, text, integer, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._end_attempt(tenant text, key text, attempt integer, at timestamp with time zone, reason text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_rows integer;
begin
  v_rows := settle_private._record_attempt(tenant, key, attempt);
  update settle_private.attempts a
     set ended_at = _end_attempt.at, end_reason = _end_attempt.reason
   where a.tenant = _end_attempt.tenant and a.key = _end_attempt.key and a.attempt = _end_attempt.attempt
     and a.ended_at is null;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

ALTER FUNCTION settle_private._end_attempt(tenant text, key text, attempt integer, at timestamp with time zone, reason text) OWNER TO settle_owner;

--
-- Name: _exact(interval); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._exact(d interval) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select date_part('month', d) = 0 and date_part('year', d) = 0
$$;

ALTER FUNCTION settle_private._exact(d interval) OWNER TO settle_owner;

--
-- Name: _expire(settle_private.operations, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._expire(op settle_private.operations, as_of timestamp with time zone, actor text) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_writes integer := 0;
  v_op settle_private.operations := op;
  v_exhausted boolean := op.attempt >= op.max_attempts;
begin
  if v_op.lease_token is not null then
    v_writes := v_writes + settle_private._end_attempt(op.tenant, op.key, op.attempt, as_of,
      case when v_exhausted then 'exhausted' else 'lease_expired' end);
  end if;
  if v_exhausted then
    v_op := settle_private._dead_letter(op, as_of, jsonb_build_object('code', 'attempts_exhausted',
      'attempts', op.attempt, 'last_status', op.status::text));
  else
    update settle_private.operations o
       set status = case when op.status = 'running' then 'pending'::settle.status else op.status end,
           lease_token = null, lease_expires_at = null, updated_at = as_of
     where o.tenant = op.tenant and o.key = op.key
    returning * into v_op;
  end if;
  v_writes := v_writes + settle_private._audit(op.tenant, op.key, as_of, 'expire',
    case when v_exhausted then 'dead_lettered' else 'expired' end, op.attempt, op.status, v_op.status, actor,
    jsonb_strip_nulls(jsonb_build_object('lease_expires_at', op.lease_expires_at,
                                         'dead_letter_reason', v_op.dead_letter_reason)));
  return v_op;
end
$$;

ALTER FUNCTION settle_private._expire(op settle_private.operations, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _expire_key(text, text, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._expire_key(tenant text, key text, as_of timestamp with time zone, actor text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _expire_key.tenant and o.key = _expire_key.key
     and ((o.lease_token is not null and o.lease_expires_at <= _expire_key.as_of)
          or (o.lease_token is null and o.status in ('pending', 'unknown', 'conflict') and o.attempt >= o.max_attempts
              and o.dead_lettered_at is null))
   for update skip locked;
  if not found then
    return 0;
  end if;
  v_op := settle_private._expire(v_op, _expire_key.as_of, _expire_key.actor);
  return case when v_op.dead_lettered_at is not null then 2 else 1 end;
end
$$;

ALTER FUNCTION settle_private._expire_key(tenant text, key text, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _expiry(timestamp with time zone, interval); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._expiry(at timestamp with time zone, d interval) RETURNS timestamp with time zone
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select (at at time zone 'UTC' + d) at time zone 'UTC'
$$;

ALTER FUNCTION settle_private._expiry(at timestamp with time zone, d interval) OWNER TO settle_owner;

--
-- Name: _feed_check_admin(text, text[], text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_check_admin(call text, tenants text[], consumer text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_bound text[] := settle_private._visible_tenants();
begin
  if v_bound is not null and (tenants is null or not (tenants <@ v_bound)) then
    perform settle_private._refuse_bound(call, jsonb_build_object('consumer', consumer));
  end if;
end
$$;

ALTER FUNCTION settle_private._feed_check_admin(call text, tenants text[], consumer text) OWNER TO settle_owner;

--
-- Name: feed_consumers; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.feed_consumers (
    name text NOT NULL,
    tenants text[],
    lanes integer NOT NULL,
    registered_at timestamp with time zone NOT NULL,
    registered_by text NOT NULL,
    CONSTRAINT lanes_in_range CHECK (((lanes >= 1) AND (lanes <= 64)))
);

ALTER TABLE ONLY settle_private.feed_consumers FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.feed_consumers OWNER TO settle_owner;

--
-- Name: TABLE feed_consumers; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.feed_consumers IS 'Registered feed consumers: name, tenant set (NULL: every tenant) and number of lanes. Private: use settle.register_consumer / settle.drop_consumer.';

--
-- Name: _feed_consumer(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_consumer(name text) RETURNS settle_private.feed_consumers
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle_private._feed_consumer(name text) OWNER TO settle_owner;

--
-- Name: _feed_horizon(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_horizon() RETURNS xid8
    LANGUAGE sql STABLE
    AS $$
  select pg_snapshot_xmin(pg_current_snapshot())
$$;

ALTER FUNCTION settle_private._feed_horizon() OWNER TO settle_owner;

--
-- Name: _feed_horizon_holders(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_horizon_holders() RETURNS TABLE(pid integer, login text, application_name text, state text, xid text, xid_age integer, xact_age_seconds double precision, holds_horizon boolean, feed_consumer boolean, consumer text, lane integer)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS $$
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

ALTER FUNCTION settle_private._feed_horizon_holders() OWNER TO settle_owner;

--
-- Name: FUNCTION _feed_horizon_holders(); Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON FUNCTION settle_private._feed_horizon_holders() IS 'Rows of settle.feed_horizon (the transactions holding the feed''s horizon back). Internal: read the view.';

--
-- Name: _feed_in_lane(integer, text, integer, integer, text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
  select (lanes = 1 or ((lane_hash & 2147483647) % 64) % lanes = lane) and (tenants is null or tenant = any (tenants))
$$;

ALTER FUNCTION settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]) OWNER TO settle_owner;

--
-- Name: _feed_lag(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_lag() RETURNS TABLE(consumer text, tenants text[], lanes integer, lane integer, position_xid xid8, position_id bigint, leased boolean, lease_expires_at timestamp with time zone, acked_at timestamp with time zone, lag_events bigint, oldest_unacked_at timestamp with time zone, lag_seconds double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
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

ALTER FUNCTION settle_private._feed_lag() OWNER TO settle_owner;

--
-- Name: FUNCTION _feed_lag(); Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON FUNCTION settle_private._feed_lag() IS 'Rows of settle.feed_consumers (position, lease and lag per lane). Internal: read the view.';

--
-- Name: _feed_lane_marker(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_lane_marker(consumer text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
  select hashtext('pg-settle feed lane ' || consumer)
$$;

ALTER FUNCTION settle_private._feed_lane_marker(consumer text) OWNER TO settle_owner;

--
-- Name: _feed_metrics(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_metrics() RETURNS TABLE(feed_consumers bigint, feed_lag_events bigint, feed_lag_seconds double precision, feed_events_retained bigint, feed_horizon_age_seconds double precision, feed_horizon_xid_age bigint, feed_horizon_held_by_consumer bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS $$
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

ALTER FUNCTION settle_private._feed_metrics() OWNER TO settle_owner;

--
-- Name: FUNCTION _feed_metrics(); Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON FUNCTION settle_private._feed_metrics() IS 'The feed gauges of settle.metrics (one row). Internal: read settle.metrics.';

--
-- Name: _feed_positions_lock(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_positions_lock() RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$
  select -8301926554122431017::bigint
$$;

ALTER FUNCTION settle_private._feed_positions_lock() OWNER TO settle_owner;

--
-- Name: _feed_visible(text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._feed_visible(tenants text[]) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
  select (select settle_private._visible_tenants()) is null
      or (tenants is not null and tenants <@ (select settle_private._visible_tenants()))
$$;

ALTER FUNCTION settle_private._feed_visible(tenants text[]) OWNER TO settle_owner;

--
-- Name: _fence_reason(settle_private.operations, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._fence_reason(op settle_private.operations, attempt integer) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  select case
    when op.status in ('completed', 'failed') then 'settled'
    when op.attempt > _fence_reason.attempt then 'superseded'
    else 'lease_released' end
$$;

ALTER FUNCTION settle_private._fence_reason(op settle_private.operations, attempt integer) OWNER TO settle_owner;

--
-- Name: _fingerprint(jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._fingerprint(request jsonb) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
    AS $$
  select 'v1:' || encode(sha256(convert_to(settle_private._canonical_json(request), 'UTF8')), 'hex')
$$;

ALTER FUNCTION settle_private._fingerprint(request jsonb) OWNER TO settle_owner;

--
-- Name: _floor(text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._floor(tenant text, principal text) RETURNS bigint
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return coalesce((select f.below_generation from settle_private.binding_floors f
                    where f.tenant = _floor.tenant and f.principal = _floor.principal), 0);
end
$$;

ALTER FUNCTION settle_private._floor(tenant text, principal text) OWNER TO settle_owner;

--
-- Name: _heartbeat_revoked(settle_private.operations, integer, uuid, bigint, timestamp with time zone); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._heartbeat_revoked(op settle_private.operations, attempt integer, lease_token uuid, below bigint, as_of timestamp with time zone) RETURNS settle.heartbeat_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
  v_res settle.heartbeat_result;
begin
  if not settle_private._is_attempt_token(op.tenant, op.key, attempt, lease_token) then
    return v_res;
  end if;
  v_op := settle_private._revoke_operation(op, below, as_of, null);
  perform settle_private._audit(op.tenant, op.key, as_of, 'heartbeat', 'fenced', attempt, v_op.status, v_op.status, null,
    jsonb_build_object('reason', 'binding_revoked', 'below_generation', below));
  v_res.outcome := 'fenced';
  v_res.reason := 'binding_revoked';
  return v_res;
end
$$;

ALTER FUNCTION settle_private._heartbeat_revoked(op settle_private.operations, attempt integer, lease_token uuid, below bigint, as_of timestamp with time zone) OWNER TO settle_owner;

--
-- Name: _invisible(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._invisible() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select '\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff'::text
$$;

ALTER FUNCTION settle_private._invisible() OWNER TO settle_owner;

--
-- Name: _is_attempt_token(text, text, integer, uuid); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._is_attempt_token(tenant text, key text, attempt integer, token uuid) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
begin
  return exists (select 1 from settle_private.operations o
                  where o.tenant = _is_attempt_token.tenant and o.key = _is_attempt_token.key
                    and o.attempt = _is_attempt_token.attempt and o.attempt_token = _is_attempt_token.token)
      or exists (select 1 from settle_private.attempts a
                  where a.tenant = _is_attempt_token.tenant and a.key = _is_attempt_token.key
                    and a.attempt = _is_attempt_token.attempt and a.lease_token = _is_attempt_token.token);
end
$$;

ALTER FUNCTION settle_private._is_attempt_token(tenant text, key text, attempt integer, token uuid) OWNER TO settle_owner;

--
-- Name: _is_blank(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._is_blank(value text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select value ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]*$'
$_$;

ALTER FUNCTION settle_private._is_blank(value text) OWNER TO settle_owner;

--
-- Name: _json_bytes(jsonb, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._json_bytes(value jsonb, max_bytes integer) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  select case when pg_column_size(value) > 8 * max_bytes then null else octet_length(value::text) end
$$;

ALTER FUNCTION settle_private._json_bytes(value jsonb, max_bytes integer) OWNER TO settle_owner;

--
-- Name: _json_ok(jsonb, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._json_ok(value jsonb, max_bytes integer) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
  select case when pg_column_size(value) > 8 * max_bytes then false
              else octet_length(value::text) <= max_bytes end
$$;

ALTER FUNCTION settle_private._json_ok(value jsonb, max_bytes integer) OWNER TO settle_owner;

--
-- Name: _keyed_instant(text, text, bigint, bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._keyed_instant(tenant text, principal text, binding_generation bigint, floor_at_start bigint) RETURNS timestamp with time zone
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_floor bigint := settle_private._access(_keyed_instant.tenant, _keyed_instant.principal);
begin
  if (v_floor >= 0 and _keyed_instant.binding_generation >= v_floor)
     is distinct from (floor_at_start >= 0 and _keyed_instant.binding_generation >= floor_at_start) then
    raise sqlstate 'SE098' using message = 'the batch is decided again';
  end if;
  return clock_timestamp();
end
$$;

ALTER FUNCTION settle_private._keyed_instant(tenant text, principal text, binding_generation bigint, floor_at_start bigint) OWNER TO settle_owner;

--
-- Name: _lease_ok(interval); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._lease_ok(lease interval) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select settle_private._exact(lease)
     and lease between settle_private._limit('min_lease_ms') * interval '1 millisecond'
                   and settle_private._limit('max_lease_ms') * interval '1 millisecond'
$$;

ALTER FUNCTION settle_private._lease_ok(lease interval) OWNER TO settle_owner;

--
-- Name: _limit(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._limit(name text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select (settle_private._limits() ->> name)::integer
$$;

ALTER FUNCTION settle_private._limit(name text) OWNER TO settle_owner;

--
-- Name: _limits(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._limits() RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select '{
    "tenant_bytes": 64,
    "key_bytes": 255,
    "principal_bytes": 255,
    "scope_bytes": 128,
    "max_scopes": 64,
    "worker_bytes": 128,
    "reason_bytes": 1024,
    "request_bytes": 65536,
    "result_bytes": 1048576,
    "error_bytes": 65536,
    "min_lease_ms": 1000,
    "max_lease_ms": 86400000,
    "max_attempts": 1000,
    "max_batch_size": 100000,
    "max_batch_keys": 1000,
    "max_batch_bytes": 16777216,
    "evidence_bytes": 8192,
    "refusal_rows": 20
  }'::jsonb
$$;

ALTER FUNCTION settle_private._limits() OWNER TO settle_owner;

--
-- Name: _lock_diff(settle_private.operations, text, text, text[], bigint); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._lock_diff(op settle_private.operations, fingerprint text, principal text, scopes text[], binding_generation bigint) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
  select array_remove(array[
    case when op.fingerprint is distinct from _lock_diff.fingerprint then 'request' end,
    case when op.principal is distinct from _lock_diff.principal then 'principal' end,
    case when op.scopes is distinct from settle_private._normalize_scopes(_lock_diff.scopes) then 'scopes' end,
    case when op.binding_generation is distinct from _lock_diff.binding_generation then 'binding_generation' end
  ], null)
$$;

ALTER FUNCTION settle_private._lock_diff(op settle_private.operations, fingerprint text, principal text, scopes text[], binding_generation bigint) OWNER TO settle_owner;

--
-- Name: _lock_operation(text, text, boolean, boolean); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._lock_operation(tenant text, key text, purged_ok boolean DEFAULT false, lock boolean DEFAULT true) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
begin
  if lock then
    select * into v_op from settle_private.operations o
     where o.tenant = _lock_operation.tenant and o.key = _lock_operation.key
     for update;
  else
    select * into v_op from settle_private.operations o
     where o.tenant = _lock_operation.tenant and o.key = _lock_operation.key;
  end if;
  if not found and purged_ok and exists (
       select 1 from settle_private.audit_log l
        where l.tenant = _lock_operation.tenant and l.key = _lock_operation.key and l.event = 'purge') then
    return v_op;
  end if;
  if not found then
    perform settle_private._raise('SE010', 'operation not found',
      jsonb_build_object('tenant', _lock_operation.tenant, 'key', _lock_operation.key),
      'No operation has this tenant and key: claim it first with settle.claim (a purged key is gone).');
  end if;
  return v_op;
end
$$;

ALTER FUNCTION settle_private._lock_operation(tenant text, key text, purged_ok boolean, lock boolean) OWNER TO settle_owner;

--
-- Name: _lookalike_spaces(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._lookalike_spaces() RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select '\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u2800\u3000'::text
$$;

ALTER FUNCTION settle_private._lookalike_spaces() OWNER TO settle_owner;

--
-- Name: _may_have_taken_effect(text, text, settle.status, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._may_have_taken_effect(tenant text, key text, status settle.status, attempt integer) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
begin
  return _may_have_taken_effect.status in ('unknown', 'conflict')
      or exists (select 1 from settle_private.attempts a
                  where a.tenant = _may_have_taken_effect.tenant and a.key = _may_have_taken_effect.key
                    and a.observation is distinct from 'failed')
      or not exists (select 1 from settle_private.attempts a
                      where a.tenant = _may_have_taken_effect.tenant and a.key = _may_have_taken_effect.key
                        and a.attempt = _may_have_taken_effect.attempt);
end
$$;

ALTER FUNCTION settle_private._may_have_taken_effect(tenant text, key text, status settle.status, attempt integer) OWNER TO settle_owner;

--
-- Name: _metrics(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._metrics() RETURNS TABLE(operations_in_flight bigint, lapsed_leases bigint, operations_unknown bigint, oldest_unknown_age_seconds double precision, operations_conflict bigint, dead_letters_failed bigint, dead_letters_needs_reconciliation bigint, oldest_dead_letter_age_seconds double precision, conflicts_recent bigint, refused_observations_recent bigint, recent_window_seconds integer)
    LANGUAGE sql STABLE SECURITY DEFINER ROWS 1
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS $$
select (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at > w.now
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_in_flight,
       (select count(*) from settle_private.operations o
         where o.lease_token is not null and o.lease_expires_at <= w.now
           and (w.tenants is null or o.tenant = any (w.tenants))) as lapsed_leases,
       (select count(*) from settle_private.operations o where o.status = 'unknown'
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_unknown,
       coalesce((select extract(epoch from w.now - min(o.updated_at))::float8
                   from settle_private.operations o where o.status = 'unknown'
           and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_unknown_age_seconds,
       (select count(*) from settle_private.operations o where o.status = 'conflict'
           and (w.tenants is null or o.tenant = any (w.tenants))) as operations_conflict,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status between 'failed' and 'failed'
           and (w.tenants is null or o.tenant = any (w.tenants))) as dead_letters_failed,
       (select count(*) from settle_private.operations o
         where o.dead_lettered_at is not null and o.status between 'unknown' and 'conflict'
           and (w.tenants is null or o.tenant = any (w.tenants))) as dead_letters_needs_reconciliation,
       coalesce((select extract(epoch from w.now - min(o.dead_lettered_at))::float8
                   from settle_private.operations o where o.dead_lettered_at is not null
                    and o.status between 'unknown' and 'failed'
                    and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_dead_letter_age_seconds,
       (select count(*) from settle_private.audit_log a
         where a.outcome = 'conflict' and a.at > w.now - w.recent
           and (w.tenants is null or a.tenant = any (w.tenants))) as conflicts_recent,
       (select count(*) from settle_private.audit_log a
         where a.outcome in ('conflict', 'fenced') and a.at > w.now - w.recent
           and a.event in ('complete', 'fail', 'report_unknown')
           and (w.tenants is null or a.tenant = any (w.tenants))) as refused_observations_recent,
       extract(epoch from w.recent)::integer as recent_window_seconds
  from (select clock_timestamp() as now, interval '5 minutes' as recent,
               settle_private._visible_tenants() as tenants) w
$$;

ALTER FUNCTION settle_private._metrics() OWNER TO settle_owner;

--
-- Name: FUNCTION _metrics(); Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON FUNCTION settle_private._metrics() IS 'The gauges of settle.metrics (one row), run with jit = off. Internal: read settle.metrics.';

--
-- Name: _name_ascii_ok(text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._name_ascii_ok(value text, max_bytes integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
  select octet_length(value) <= max_bytes and value ~ '^[!-~]([ -~]*[!-~])?$'
$_$;

ALTER FUNCTION settle_private._name_ascii_ok(value text, max_bytes integer) OWNER TO settle_owner;

--
-- Name: _name_ok(text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._name_ok(value text, max_bytes integer) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select settle_private._name_ascii_ok(value, max_bytes)
      or (octet_length(value) <= max_bytes and settle_private._name_ok_unicode(value))
$$;

ALTER FUNCTION settle_private._name_ok(value text, max_bytes integer) OWNER TO settle_owner;

--
-- Name: _name_ok_unicode(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._name_ok_unicode(value text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
begin
  return value !~ ('[[:cntrl:]' || settle_private._invisible() || settle_private._lookalike_spaces() || ']')
     and value !~ '^[[:space:]]|[[:space:]]$'
     and not settle_private._is_blank(value)
     and value is nfc normalized;
end
$_$;

ALTER FUNCTION settle_private._name_ok_unicode(value text) OWNER TO settle_owner;

--
-- Name: _next_seq(text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._next_seq(tenant text, key text) RETURNS bigint
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_seq bigint;
begin
  select coalesce(greatest(
           (select max(l.seq) from settle_private.audit_log l where l.tenant = _next_seq.tenant and l.key = _next_seq.key),
           (select max(a.claim_seq) from settle_private.attempts a
             where a.tenant = _next_seq.tenant and a.key = _next_seq.key),
           (select greatest(o.claim_seq, o.settled_seq) from settle_private.operations o
             where o.tenant = _next_seq.tenant and o.key = _next_seq.key)), 0) + 1
    into v_seq;
  return v_seq;
end
$$;

ALTER FUNCTION settle_private._next_seq(tenant text, key text) OWNER TO settle_owner;

--
-- Name: _normalize_scopes(text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._normalize_scopes(scopes text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select case when cardinality(scopes) < 2 then scopes else settle_private._sort_scopes(scopes) end
$$;

ALTER FUNCTION settle_private._normalize_scopes(scopes text[]) OWNER TO settle_owner;

--
-- Name: _observation_revoked(text, settle_private.operations, integer, text, text, text[], bigint, jsonb, bigint, timestamp with time zone); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._observation_revoked(kind text, op settle_private.operations, attempt integer, fingerprint text, principal text, scopes text[], binding_generation bigint, payload jsonb, below bigint, as_of timestamp with time zone) RETURNS settle.observation_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_res settle.observation_result;
begin
  perform settle_private._audit(op.tenant, op.key, as_of, kind, 'fenced', attempt, op.status, op.status, null,
    jsonb_build_object('reason', 'binding_revoked', 'below_generation', below,
      'presented', settle_private._presented(fingerprint, principal, scopes, binding_generation,
                                             case kind when 'fail' then 'error' else 'result' end, payload)));
  v_res.outcome := 'fenced';
  v_res.reason := 'binding_revoked';
  return v_res;
end
$$;

ALTER FUNCTION settle_private._observation_revoked(kind text, op settle_private.operations, attempt integer, fingerprint text, principal text, scopes text[], binding_generation bigint, payload jsonb, below bigint, as_of timestamp with time zone) OWNER TO settle_owner;

--
-- Name: _observe(text, text, text, integer, uuid, text, text, text[], bigint, jsonb, jsonb, boolean); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._observe(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) RETURNS settle.observation_result
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
declare
  v_writes integer := 0;
  v_now timestamptz := clock_timestamp();
  v_op settle_private.operations;
  v_att settle_private.attempts;
  v_before settle.status;
  v_diff text[];
  v_current boolean;
  v_exhausted boolean;
  v_res settle.observation_result;
  v_floor bigint;
  v_seen record; -- verdict and op, as in settle.claim (00008)
  v_logged boolean := false;
  v_audit_id bigint;
  v_seq bigint;
  v_valid boolean;
begin
  if (settle_private._name_ok(_observe.tenant, settle_private._limit('tenant_bytes'))
      and settle_private._name_ok(_observe.key, settle_private._limit('key_bytes'))
      and _observe.attempt >= 1 and _observe.lease_token is not null
      and _observe.fingerprint ~ '^v[0-9]+:[0-9a-f]+$' and octet_length(_observe.fingerprint) - strpos(_observe.fingerprint, ':') = 64
      and settle_private._binding_ok(_observe.principal, _observe.scopes, _observe.binding_generation)
      and case kind
            when 'complete' then settle_private._json_ok(_observe.result, settle_private._limit('result_bytes'))
            when 'fail' then settle_private._json_ok(_observe.error, settle_private._limit('error_bytes'))
                          and _observe.retryable is not null
            else true end) is not true then
    perform settle_private._check_observation(kind, _observe.tenant, _observe.key, _observe.attempt,
      _observe.lease_token, _observe.fingerprint, _observe.principal, _observe.scopes,
      _observe.binding_generation, _observe.result, _observe.error, _observe.retryable);
  end if;

  -- One statement checks access (00007: the login role's tenant binding) and the presented
  -- token, and locks the operation row only when both pass: a refused caller never holds a row
  -- lock of a tenant it may not reach, and a caller without the named attempt's token (a
  -- guessed or stale token, a purged key) is answered from a plain read below, without waiting
  -- on the row or making the lease holder wait. An attempt's token never changes,
  -- so the snapshot this statement reads it from cannot be stale.
  -- (The token is read by a statement of its own: on Citus a function that reads a distributed
  -- table may not run inside a statement routed to the key's shard.)
  v_valid := settle_private._is_attempt_token(_observe.tenant, _observe.key, _observe.attempt, _observe.lease_token);
  with a as materialized (
    select case when exists (select 1 from settle_private.tenant_bindings r
                              where (r.role_oid = to_regrole(quote_ident(session_user::text))::oid or r.role_name = session_user::text)
                                and not (_observe.tenant = any (r.tenants))) then -1
                else 0 end as verdict,
           v_valid as valid
  )
  select a.verdict, a.valid, x.op into v_seen
    from a left join lateral (
      select o as op from settle_private.operations o
       where o.tenant = _observe.tenant and o.key = _observe.key and a.verdict >= 0 and a.valid
         for update) x on true;
  if v_seen.verdict < 0 then
    perform settle_private._refuse_tenant(_observe.tenant, _observe.key, kind);
  end if;
  v_op := v_seen.op;
  if not v_seen.valid or v_op.tenant is null then
    -- No such attempt or not its token: nothing is disclosed and nothing waits. Never claimed
    -- raises SE010; a purged key (a straggler) is an all-NULL row.
    v_op := settle_private._lock_operation(_observe.tenant, _observe.key, purged_ok => true, lock => false);
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, 'fenced', _observe.attempt,
      v_op.status, v_op.status, null, jsonb_build_object(
        'reason', case when v_op.tenant is null then 'operation_purged' else 'invalid_token' end,
        'presented', settle_private._presented(
        _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
        case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error))));
    v_res.outcome := 'fenced';
    v_res.reason := 'invalid_token';
    return v_res;
  end if;

  -- Locked. Everything is decided again from here with what committed while this call waited:
  -- the time (settled_at, a lapsed lease), the tenant binding and the
  -- revocation floor, the attempt's record, and the place of this call in the key's history (as
  -- settle_private._next_seq numbers it, 00006) for a settlement logged on the operation below.
  v_now := clock_timestamp();
  select case when exists (select 1 from settle_private.tenant_bindings b   -- settle_private._access (00007)
                            where (b.role_oid = to_regrole(quote_ident(session_user::text))::oid or b.role_name = session_user::text) and not (_observe.tenant = any (b.tenants))) then -1
              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _observe.tenant and f.principal = _observe.principal), 0) end as verdict,
         (select a from settle_private.attempts a
           where a.tenant = _observe.tenant and a.key = _observe.key and a.attempt = _observe.attempt) as att,
         coalesce(greatest(
           (select max(l.seq) from settle_private.audit_log l where l.tenant = _observe.tenant and l.key = _observe.key),
           (select max(a.claim_seq) from settle_private.attempts a
             where a.tenant = _observe.tenant and a.key = _observe.key)), 0) + 1 as seq
    into v_seen;
  v_floor := v_seen.verdict;
  if v_floor < 0 then
    perform settle_private._refuse_tenant(_observe.tenant, _observe.key, kind);
  end if;
  v_seq := greatest(v_seen.seq, v_op.claim_seq + 1, v_op.settled_seq + 1);
  -- The attempt as settle.attempts shows it: its record, or the operation's current attempt that
  -- has none yet (nothing ended or observed); the attempt that settled the operation observed
  -- completed (its observation is the operation's settlement, 00002).
  v_att := v_seen.att;
  if v_att.attempt is null then
    v_att.attempt := _observe.attempt;
    v_att.worker := v_op.worker;
  end if;
  if v_op.settled_attempt = _observe.attempt then
    v_att.observation := 'completed';
  end if;
  if v_floor > 0 or v_op.principal <> _observe.principal then
    -- An operation reserved under a revoked generation is converted at this touch.
    v_op := settle_private._revoke_on_touch(v_op, _observe.principal, v_floor, v_now);
  end if;
  if _observe.binding_generation < v_floor then
    -- A revoked generation settles nothing; what it presented is kept as evidence.
    return settle_private._observation_revoked(kind, v_op, _observe.attempt, _observe.fingerprint,
      _observe.principal, _observe.scopes, _observe.binding_generation,
      coalesce(_observe.result, _observe.error), v_floor, v_now);
  end if;
  v_before := v_op.status;

  -- Binding gate: an observation that does not re-present the reserved lock never
  -- upgrades the canonical state and never sees or touches the result. A mismatched
  -- success flags the operation `conflict` (an effect may have run for another intent).
  -- Any mismatched observation is terminal for its attempt: the attempt
  -- records `conflict`, loses the lease if it held it, and is fenced from then on, so it can
  -- never settle later by presenting the right lock with what it did for another one.
  v_diff := settle_private._lock_diff(v_op, _observe.fingerprint, _observe.principal, _observe.scopes,
    _observe.binding_generation);
  if cardinality(v_diff) > 0 then
    v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;
    if v_current or (kind = 'complete' and settle_private._rank(v_op.status) < settle_private._rank('conflict')) then
      -- The mismatched observation ends its attempt: the lease goes with it.
      update settle_private.operations o
         set status = case when kind = 'complete' and settle_private._rank(v_op.status) < settle_private._rank('conflict')
                           then 'conflict'::settle.status
                           when v_current and v_op.status = 'running' then 'pending'::settle.status
                           else v_op.status end,
             lease_token = case when v_current then null else o.lease_token end,
             lease_expires_at = case when v_current then null else o.lease_expires_at end,
             updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
    end if;
    if settle_private._rank(v_att.observation) < settle_private._rank('conflict') then
      v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'conflict', v_now);
    end if;
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, 'conflict', _observe.attempt,
      v_before, v_op.status, v_att.worker, jsonb_build_object('conflict_on', v_diff, 'presented', settle_private._presented(
        _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
        case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error))));
    v_res.outcome := 'conflict';
    v_res.reason := 'lock_mismatch';
    v_res.conflict_on := settle_private._conflict_on(v_diff);
    return v_res;
  end if;

  v_res.attempt := v_op.attempt;
  v_current := v_op.lease_token is not distinct from _observe.lease_token and v_op.attempt = _observe.attempt;

  -- Attempt-scoped settlement lock: one terminal observation per attempt. An attempt that
  -- presented a mismatched lock (observation conflict) is fenced for good, whatever it
  -- presents now.
  if v_att.observation = 'conflict' then
    v_res.outcome := 'fenced';
    v_res.reason := 'attempt_conflicted';
  elsif v_att.observation in ('failed', 'completed') then
    if (kind = 'complete' and v_att.observation = 'completed'
          and (case when v_op.settled_attempt = _observe.attempt then v_op.result else v_att.late_result end) = _observe.result)
       or (kind = 'fail' and v_att.observation = 'failed' and v_att.error = _observe.error
          and v_att.retryable = _observe.retryable) then
      v_res.outcome := 'duplicate';
    else
      v_res.outcome := 'already_settled';
      v_res.reason := 'attempt_already_observed';
    end if;
  elsif kind = 'complete' then
    if v_op.status = 'completed' then
      -- A second success: the effect ran twice. Record it on its own attempt, never
      -- replace the result, never produce a second settlement.
      v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'completed', v_now,
        late_result => _observe.result);
      v_res.outcome := 'already_settled';
      v_res.reason := 'late_success';
    else
      -- Why this attempt settles: it holds the lease, or a later attempt exists but has not
      -- settled, or it is the latest attempt but its lease was released (it reported unknown,
      -- or its lapsed lease was expired) and nothing else settled.
      v_res.outcome := 'settled';
      v_res.reason := case
        when v_current then 'current_attempt'
        when v_op.attempt > _observe.attempt then 'superseded_attempt'
        else 'lease_released' end;
      -- The settlement, with its log (complete:settled in settle.audit_log: no audit row), on
      -- the operation row: that attempt's observation is the settlement (00002). (The identity is
      -- drawn first: Citus refuses a volatile function in an UPDATE of a distributed table.)
      v_audit_id := nextval('settle_private.audit_log_audit_id_seq');
      update settle_private.operations o
         set status = 'completed', result = _observe.result, settled_attempt = _observe.attempt,
             settled_at = v_now, settled_seq = v_seq, settled_audit_id = v_audit_id, settled_status_before = v_before,
             settled_reason = v_res.reason, settled_by = session_user, lease_token = null, lease_expires_at = null,
             dead_lettered_at = null, dead_letter_reason = null, error = null, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_logged := true;
      if v_op.attempt > _observe.attempt then
        -- A superseded attempt's success settled: the live attempt, if any, is over.
        v_writes := v_writes + settle_private._end_attempt(_observe.tenant, _observe.key, v_op.attempt, v_now, 'settled_elsewhere');
      end if;
    end if;
  elsif not v_current then
    -- Weaker observations of an attempt that no longer holds the lease are fenced.
    v_res.outcome := 'fenced';
    v_res.reason := settle_private._fence_reason(v_op, _observe.attempt);
  elsif kind = 'fail' then
    v_exhausted := not _observe.retryable or v_op.attempt >= v_op.max_attempts;
    v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'failed', v_now,
      error => _observe.error, retryable => _observe.retryable);
    if not _observe.retryable and not settle_private._may_have_taken_effect(v_op.tenant, v_op.key, v_op.status, v_op.attempt) then
      -- A final failure is a committed failure when no attempt may have taken effect.
      update settle_private.operations o
         set status = 'failed', error = _observe.error, lease_token = null, lease_expires_at = null,
             updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_res.outcome := 'settled';
      v_res.reason := 'final_failure';
    elsif v_exhausted then
      -- The last allowed attempt failed, or a final failure arrived after an earlier attempt may
      -- have taken effect (it reported unknown, conflicted, or lapsed): failed only
      -- if every attempt failed, else unknown and needs_reconciliation (see _dead_letter). A
      -- false `failed` would make the caller issue the effect again.
      v_op := settle_private._dead_letter(v_op, v_now, _observe.error);
      v_res.outcome := case when v_op.status = 'failed' then 'settled' else 'recorded' end;
      v_res.reason := v_op.dead_letter_reason;
    else
      update settle_private.operations o
         set status = case when v_op.status = 'running' then 'pending'::settle.status else v_op.status end,
             lease_token = null, lease_expires_at = null, updated_at = v_now
       where o.tenant = _observe.tenant and o.key = _observe.key
      returning * into v_op;
      v_res.outcome := 'recorded';
      v_res.reason := 'retryable_failure';
    end if;
  else
    -- report_unknown from the lease holder: the caller lost the response. Never a failure.
    v_writes := v_writes + settle_private._record_observation(_observe.tenant, _observe.key, _observe.attempt, 'unknown', v_now);
    update settle_private.operations o
       set status = case when settle_private._rank(v_op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else v_op.status end,
           lease_token = null, lease_expires_at = null, updated_at = v_now
     where o.tenant = _observe.tenant and o.key = _observe.key
    returning * into v_op;
    if v_op.attempt >= v_op.max_attempts then
      -- The last allowed attempt lost its response: dead-lettered, needs reconciliation.
      v_op := settle_private._dead_letter(v_op, v_now, null);
    end if;
    v_res.outcome := 'recorded';
    v_res.reason := 'outcome_unknown';
  end if;

  -- Refused and fenced observations keep what they presented (bounded by _presented); the
  -- accepted ones are on the operation and attempt rows already.
  if not v_logged then
    v_writes := v_writes + settle_private._audit(_observe.tenant, _observe.key, v_now, kind, v_res.outcome, _observe.attempt,
      v_before, v_op.status, v_att.worker,
      case when v_res.outcome in ('fenced', 'already_settled') then
             jsonb_build_object('reason', v_res.reason, 'presented', settle_private._presented(
               _observe.fingerprint, _observe.principal, _observe.scopes, _observe.binding_generation,
               case kind when 'complete' then 'result' when 'fail' then 'error' end, coalesce(_observe.result, _observe.error)))
           when v_res.reason is not null then jsonb_build_object('reason', v_res.reason) end);
  end if;

  return row(v_res.outcome, v_res.reason, v_op.status, v_op.attempt, v_op.settled_attempt, v_op.result,
             v_op.error, null, v_op.dead_lettered_at is not null, v_op.dead_letter_reason)::settle.observation_result;
end
$_$;

ALTER FUNCTION settle_private._observe(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) OWNER TO settle_owner;

--
-- Name: _presented(text, text, text[], bigint, text, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._presented(fingerprint text, principal text, scopes text[], binding_generation bigint, payload_name text, payload jsonb) RETURNS jsonb
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_full jsonb := jsonb_strip_nulls(jsonb_build_object(
    'fingerprint', fingerprint, 'principal', principal, 'scopes', to_jsonb(scopes),
    'binding_generation', binding_generation));
  v_digest constant text := 'sha256';
begin
  if payload is not null then
    if pg_column_size(payload) <= 8 * settle_private._limit('evidence_bytes')
       and octet_length(payload::text) <= settle_private._limit('evidence_bytes') then
      v_full := v_full || jsonb_build_object(payload_name, payload);
    else
      v_full := v_full || jsonb_build_object(payload_name || '_truncated', jsonb_build_object(
        'bytes', octet_length(payload::text), v_digest, encode(sha256(convert_to(payload::text, 'UTF8')), 'hex')));
    end if;
  end if;
  if octet_length(v_full::text) <= settle_private._limit('evidence_bytes') then
    return v_full;
  end if;
  v_full := v_full - 'scopes' - payload_name;
  if scopes is not null then
    v_full := v_full || jsonb_build_object('scopes_truncated', jsonb_build_object(
      'count', cardinality(scopes), 'bytes', octet_length(to_jsonb(scopes)::text),
      v_digest, encode(sha256(convert_to(to_jsonb(scopes)::text, 'UTF8')), 'hex')));
  end if;
  if payload is not null and not (v_full ? (payload_name || '_truncated')) then
    v_full := v_full || jsonb_build_object(payload_name || '_truncated', jsonb_build_object(
      'bytes', octet_length(payload::text), v_digest, encode(sha256(convert_to(payload::text, 'UTF8')), 'hex')));
  end if;
  return v_full;
end
$$;

ALTER FUNCTION settle_private._presented(fingerprint text, principal text, scopes text[], binding_generation bigint, payload_name text, payload jsonb) OWNER TO settle_owner;

--
-- Name: _purge_key(text, text, timestamp with time zone, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._purge_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle_private._purge_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _purge_tombstone(text, text, timestamp with time zone); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._purge_tombstone(tenant text, key text, cutoff timestamp with time zone) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle_private._purge_tombstone(tenant text, key text, cutoff timestamp with time zone) OWNER TO settle_owner;

--
-- Name: _raise(text, text, jsonb, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._raise(code text, message text, detail jsonb, hint text DEFAULT NULL::text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception using errcode = _raise.code, message = _raise.message,
    detail = coalesce(_raise.detail::text, ''), hint = coalesce(_raise.hint, '');
end
$$;

ALTER FUNCTION settle_private._raise(code text, message text, detail jsonb, hint text) OWNER TO settle_owner;

--
-- Name: _raise_reference(text, text, text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._raise_reference(rule text, tenant text, key text, attempt integer) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception using
    errcode = 'foreign_key_violation',
    constraint = rule,
    schema = 'settle_private',
    table = 'attempts',
    message = format('insert or update on table "attempts" violates foreign key constraint "%s"', rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key, 'attempt', attempt)::text,
    hint = case rule when 'attempts_belong_to_operation' then 'An attempt is opened by settle.claim on its operation.'
                else 'The record of an attempt is written from its operation''s current attempt, as the engine writes it (00006).' end;
end
$$;

ALTER FUNCTION settle_private._raise_reference(rule text, tenant text, key text, attempt integer) OWNER TO settle_owner;

--
-- Name: _raise_row_rule(text, text, text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._raise_row_rule(rule text, relation text, tenant text, key text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception using
    errcode = 'check_violation',
    constraint = rule,
    schema = 'settle_private',
    table = relation,
    message = format('new row for relation "%s" violates check constraint "%s"', relation, rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key)::text,
    hint = 'The row rules of settle_private tables are listed in docs/protocol.md; write through the settle API.';
end
$$;

ALTER FUNCTION settle_private._raise_row_rule(rule text, relation text, tenant text, key text) OWNER TO settle_owner;

--
-- Name: _rank(settle.status); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._rank(status settle.status) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
  select case status
    when 'pending' then 1
    when 'running' then 1
    when 'unknown' then 2
    when 'conflict' then 3
    when 'failed' then 4
    when 'completed' then 5
    else 0
  end::smallint
$$;

ALTER FUNCTION settle_private._rank(status settle.status) OWNER TO settle_owner;

--
-- Name: _record_attempt(text, text, integer); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._record_attempt(tenant text, key text, attempt integer) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op record;
  v_rows integer;
begin
  select o.attempt_token, o.worker, o.claimed_at, o.claimed_by, o.claim_seq, o.claim_audit_id, o.claim_status_before,
         o.claim_status_after
    into v_op
    from settle_private.operations o
   where o.tenant = _record_attempt.tenant and o.key = _record_attempt.key and o.attempt = _record_attempt.attempt;
  if not found then
    return 0;
  end if;
  insert into settle_private.attempts as a
    (tenant, key, attempt, lease_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id,
     claim_status_before, claim_status_after)
  values
    (_record_attempt.tenant, _record_attempt.key, _record_attempt.attempt, v_op.attempt_token, v_op.worker,
     v_op.claimed_at, v_op.claimed_by, v_op.claim_seq, v_op.claim_audit_id, v_op.claim_status_before,
     v_op.claim_status_after)
  on conflict on constraint attempts_pkey do nothing;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

ALTER FUNCTION settle_private._record_attempt(tenant text, key text, attempt integer) OWNER TO settle_owner;

--
-- Name: _record_observation(text, text, integer, settle.status, timestamp with time zone, jsonb, boolean, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._record_observation(tenant text, key text, attempt integer, observation settle.status, at timestamp with time zone, error jsonb DEFAULT NULL::jsonb, retryable boolean DEFAULT NULL::boolean, late_result jsonb DEFAULT NULL::jsonb) RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_rows integer;
begin
  v_rows := settle_private._record_attempt(tenant, key, attempt);
  update settle_private.attempts a
     set observation = _record_observation.observation, observed_at = _record_observation.at,
         error = _record_observation.error, retryable = _record_observation.retryable,
         late_result = _record_observation.late_result,
         ended_at = coalesce(a.ended_at, _record_observation.at), end_reason = coalesce(a.end_reason, 'observed')
   where a.tenant = _record_observation.tenant and a.key = _record_observation.key
     and a.attempt = _record_observation.attempt;
  get diagnostics v_rows = row_count;
  return v_rows;
end
$$;

ALTER FUNCTION settle_private._record_observation(tenant text, key text, attempt integer, observation settle.status, at timestamp with time zone, error jsonb, retryable boolean, late_result jsonb) OWNER TO settle_owner;

--
-- Name: _refuse_bound(text, jsonb); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._refuse_bound(call text, detail jsonb) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise log 'pg-settle audit: %', jsonb_build_object('event', 'bound_refused', 'call', call,
    'role', session_user::text, 'at', clock_timestamp()) || detail;
  perform settle_private._raise('SE019', 'not allowed to a login bound to tenants', jsonb_build_object('call', call),
    'A login bound to tenants acts on those tenants only; an unbound settle_admin login makes engine-wide changes (docs/protocol.md section 12).');
end
$$;

ALTER FUNCTION settle_private._refuse_bound(call text, detail jsonb) OWNER TO settle_owner;

--
-- Name: _refuse_tenant(text, text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._refuse_tenant(tenant text, key text, call text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise log 'pg-settle audit: %', jsonb_build_object('event', 'tenant_refused', 'call', call,
    'role', session_user::text, 'tenant', tenant, 'key', key, 'at', clock_timestamp());
  perform settle_private._raise('SE013', 'tenant not granted to this role',
    jsonb_build_object('tenant', tenant),
    'This login role is bound to other tenants (settle.grant_tenant); connect as the role that serves this tenant.');
end
$$;

ALTER FUNCTION settle_private._refuse_tenant(tenant text, key text, call text) OWNER TO settle_owner;

--
-- Name: _resolving_failed(text, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._resolving_failed(tenant text, key text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return exists (select 1 from settle_private.audit_log l
                  where l.tenant = _resolving_failed.tenant and l.key = _resolving_failed.key
                    and l.event = 'resolve' and l.outcome = 'resolved' and l.status_after = 'failed'
                    and l.detail ->> 'xact' = pg_current_xact_id()::text);
end
$$;

ALTER FUNCTION settle_private._resolving_failed(tenant text, key text) OWNER TO settle_owner;

--
-- Name: _revoke_on_touch(settle_private.operations, text, bigint, timestamp with time zone); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._revoke_on_touch(op settle_private.operations, principal text, below bigint, as_of timestamp with time zone) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_below bigint := case when op.principal = _revoke_on_touch.principal then _revoke_on_touch.below
                         else settle_private._floor(op.tenant, op.principal) end;
begin
  if op.binding_generation < v_below then
    return settle_private._revoke_operation(op, v_below, as_of, null);
  end if;
  return op;
end
$$;

ALTER FUNCTION settle_private._revoke_on_touch(op settle_private.operations, principal text, below bigint, as_of timestamp with time zone) OWNER TO settle_owner;

--
-- Name: _revoke_operation(settle_private.operations, bigint, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._revoke_operation(op settle_private.operations, below bigint, as_of timestamp with time zone, actor text) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations := op;
  v_effect boolean;
begin
  if op.status = 'completed' or op.binding_generation >= below
     or (op.lease_token is null and settle_private._rank(op.status) >= settle_private._rank('conflict')) then
    return op;
  end if;
  -- Could an effect have happened? Yes unless every attempt ended in a recorded failure (the
  -- status itself aside: a conversion records what the attempts say).
  v_effect := settle_private._may_have_taken_effect(op.tenant, op.key, 'pending', op.attempt);
  if op.lease_token is not null then
    perform settle_private._end_attempt(op.tenant, op.key, op.attempt, as_of, 'binding_revoked');
  end if;
  update settle_private.operations o
     set status = case when settle_private._rank(op.status) < settle_private._rank('conflict')
                       then 'conflict'::settle.status else op.status end,
         error = case when settle_private._rank(op.status) < settle_private._rank('conflict')
                      then jsonb_build_object('code', 'binding_revoked', 'below_generation', below,
                                              'status_before', op.status::text, 'may_have_taken_effect', v_effect)
                      else op.error end,
         lease_token = null, lease_expires_at = null, updated_at = as_of
   where o.tenant = op.tenant and o.key = op.key
  returning * into v_op;
  perform settle_private._audit(op.tenant, op.key, as_of, 'revoke', 'binding_revoked', op.attempt, op.status, v_op.status,
    actor, jsonb_build_object('below_generation', below, 'binding_generation', op.binding_generation,
                              'may_have_taken_effect', v_effect));
  return v_op;
end
$$;

ALTER FUNCTION settle_private._revoke_operation(op settle_private.operations, below bigint, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _revoke_touch(text, text, text, bigint, timestamp with time zone, text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._revoke_touch(tenant text, key text, principal text, below bigint, as_of timestamp with time zone, actor text) RETURNS settle_private.operations
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_op settle_private.operations;
begin
  select * into v_op from settle_private.operations o
   where o.tenant = _revoke_touch.tenant and o.key = _revoke_touch.key
   for update;
  if found and v_op.principal = _revoke_touch.principal then
    v_op := settle_private._revoke_operation(v_op, _revoke_touch.below, _revoke_touch.as_of, _revoke_touch.actor);
  end if;
  return v_op;
end
$$;

ALTER FUNCTION settle_private._revoke_touch(tenant text, key text, principal text, below bigint, as_of timestamp with time zone, actor text) OWNER TO settle_owner;

--
-- Name: _scopes_ok(text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._scopes_ok(scopes text[]) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
declare
  v_scope text;
begin
  foreach v_scope in array scopes loop
    if settle_private._name_ok(v_scope, settle_private._limit('scope_bytes')) is not true then
      return false;
    end if;
  end loop;
  return true;
end
$$;

ALTER FUNCTION settle_private._scopes_ok(scopes text[]) OWNER TO settle_owner;

--
-- Name: _set_based_batches(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._set_based_batches() RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
begin
  return not exists (select 1 from pg_catalog.pg_extension e where e.extname = 'citus');
end
$$;

ALTER FUNCTION settle_private._set_based_batches() OWNER TO settle_owner;

--
-- Name: _sort_scopes(text[]); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._sort_scopes(scopes text[]) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return array(select distinct s collate "C" from unnest(scopes) as s order by 1);
end
$$;

ALTER FUNCTION settle_private._sort_scopes(scopes text[]) OWNER TO settle_owner;

--
-- Name: _tenant_ok(text); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._tenant_ok(tenant text) RETURNS boolean
    LANGUAGE plpgsql STABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  return settle_private._access(_tenant_ok.tenant, null) >= 0;
end
$$;

ALTER FUNCTION settle_private._tenant_ok(tenant text) OWNER TO settle_owner;

--
-- Name: _upkeep_metrics(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private._upkeep_metrics() RETURNS TABLE(reconciliation_leased bigint, oldest_needs_reconciliation_age_seconds double precision, resolutions_recent bigint, upkeep_jobs_overdue bigint, upkeep_jobs_failing bigint, in_doubt_under_5m bigint, in_doubt_5m_to_1h bigint, in_doubt_over_1h bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET jit TO 'off'
    AS $$
select (select count(*) from settle_private.reconciliation_leases l
         where l.expires_at > w.now
           and (w.tenants is null or l.tenant = any (w.tenants))) as reconciliation_leased,
       coalesce((select extract(epoch from w.now - min(o.dead_lettered_at))::float8
                   from settle_private.operations o where o.dead_lettered_at is not null and o.status between 'unknown' and 'conflict'
                    and (w.tenants is null or o.tenant = any (w.tenants))), 0) as oldest_needs_reconciliation_age_seconds,
       (select count(*) from settle_private.audit_log a
         where a.event = 'resolve' and a.outcome = 'resolved' and a.at > w.now - w.recent
           and (w.tenants is null or a.tenant = any (w.tenants))) as resolutions_recent,
       (select count(*) from settle.upkeep u where u.overdue) as upkeep_jobs_overdue,
       (select count(*) from settle_private.upkeep_jobs j where j.last_ok = false) as upkeep_jobs_failing,
       -- In doubt and not (yet) dead-lettered, by how long nobody touched them: what the
       -- dead_letter_in_doubt job hands to the reconciler once they pass in_doubt_after. Scalar
       -- subqueries, like the gauges above: Citus refuses a lateral join of the distributed
       -- operations to this local row. The statuses as a list (which proves the partial index's
       -- predicate) and as a range (which the planner prices as few rows: behind row-level
       -- security it has no statistics of status, and the list alone looked like half the table,
       -- read sequentially; the dead-letter read above is a range for the same reason, 00011).
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at > w.now - interval '5 minutes'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_under_5m,
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at <= w.now - interval '5 minutes' and o.updated_at > w.now - interval '1 hour'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_5m_to_1h,
       (select count(*) from settle_private.operations o
         where o.status in ('unknown', 'conflict') and o.status between 'unknown' and 'conflict' and o.dead_lettered_at is null and o.updated_at <= w.now - interval '1 hour'
           and (w.tenants is null or o.tenant = any (w.tenants))) as in_doubt_over_1h
  from (select clock_timestamp() as now, interval '5 minutes' as recent,
               settle_private._visible_tenants() as tenants) w
$$;

ALTER FUNCTION settle_private._upkeep_metrics() OWNER TO settle_owner;

--
-- Name: FUNCTION _upkeep_metrics(); Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON FUNCTION settle_private._upkeep_metrics() IS 'The reconciliation, upkeep and in-doubt gauges of settle.metrics (one row), run with jit = off. Internal: read settle.metrics.';

--
-- Name: tg_any__refuse_delete(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_any__refuse_delete() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  if tg_op = 'DELETE' and current_setting('settle.purging', true) = 'on' then
    return old;
  end if;
  raise exception using
    errcode = 'SE025',
    message = format('%s on %I.%I is refused: only settle.purge deletes', tg_op, tg_table_schema, tg_table_name),
    hint = 'Use settle.purge(older_than => ...) for retention.';
end
$$;

ALTER FUNCTION settle_private.tg_any__refuse_delete() OWNER TO settle_owner;

--
-- Name: tg_attempts__guard_identity(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_attempts__guard_identity() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.claimed_by is distinct from old.claimed_by
     or new.attempt is distinct from old.attempt or new.lease_token is distinct from old.lease_token
     or new.worker is distinct from old.worker or new.claimed_at is distinct from old.claimed_at
     or new.claim_seq is distinct from old.claim_seq or new.claim_audit_id is distinct from old.claim_audit_id
     or new.claim_status_before is distinct from old.claim_status_before
     or new.claim_status_after is distinct from old.claim_status_after then
    raise exception using
      errcode = 'SE024',
      message = 'the identity, end and log of an attempt are immutable',
      detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
  end if;
  return new;
end
$$;

ALTER FUNCTION settle_private.tg_attempts__guard_identity() OWNER TO settle_owner;

--
-- Name: tg_attempts__guard_record(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_attempts__guard_record() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
declare
  v_rule text;
  v_op record;
begin
  if tg_op = 'UPDATE' then
    -- The rules of earlier states, behind one test that a first observation fails: an end, a
    -- terminal observation, a move down.
    if old.ended_at is not null or old.observation is not null then
      if old.ended_at is not null and (new.ended_at is distinct from old.ended_at
                                       or new.end_reason is distinct from old.end_reason) then
        raise exception using
          errcode = 'SE024',
          message = 'the identity, end and log of an attempt are immutable',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
      end if;

      -- conflict is terminal too: an attempt that presented a mismatched lock never settles.
      if old.observation in ('conflict', 'failed', 'completed') and (new.observation is distinct from old.observation
         or new.error is distinct from old.error or new.retryable is distinct from old.retryable
         or new.late_result is distinct from old.late_result or new.observed_at is distinct from old.observed_at) then
        raise exception using
          errcode = 'SE024',
          message = 'an attempt holds at most one terminal observation',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'observation', old.observation)::text,
          hint = 'Attempt-scoped settlement locks: a new outcome needs a new attempt epoch (settle.claim).';
      end if;

      if settle_private._rank(new.observation) < settle_private._rank(old.observation) then
        raise exception using
          errcode = 'SE021',
          message = format('an attempt observation may not move down from %s to %s', old.observation, new.observation),
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
      end if;
    end if;
  end if;

  v_rule := case
    when not (new.attempt >= 1) then 'attempt_is_positive'
    when not ((new.claim_seq is null) = (new.claim_audit_id is null)
              and (new.claim_seq is null) = (new.claim_status_after is null)) then 'claim_log_complete'
    when not (new.observation is null or new.observation in ('unknown', 'conflict', 'failed', 'completed'))
      then 'observation_is_an_outcome'
    when not ((new.observation is null) = (new.observed_at is null)) then 'observed_iff_observation'
    when not ((new.ended_at is null) = (new.end_reason is null)) then 'end_reason_iff_ended'
    when not (new.end_reason is null or new.end_reason in ('observed', 'lease_expired', 'settled_elsewhere', 'exhausted', 'binding_revoked'))
      then 'end_reason_is_known'
    when not (new.observation is distinct from 'failed' or (new.error is not null and new.retryable is not null))
      then 'failure_has_error'
    when not (new.late_result is null or new.observation = 'completed') then 'late_result_only_with_completion'
  end;
  if v_rule is not null then
    perform settle_private._raise_row_rule(v_rule, 'attempts', new.tenant, new.key);
  end if;

  -- The checks of a foreign key (00002), after the row rules as a foreign key's check comes
  -- after CHECK constraints, without a foreign key's row lock: a record belongs to an operation
  -- (attempts_belong_to_operation) and, when written, records its current attempt as it stands.
  -- Once written, the record of the attempt that settled the operation takes no observation:
  -- that attempt observed `completed` (the operation's settlement; settle.attempts shows it).
  if tg_op = 'INSERT' then
    select o.attempt, o.attempt_token, o.worker, o.claimed_at, o.claimed_by, o.claim_seq, o.claim_audit_id,
           o.claim_status_before, o.claim_status_after
      into v_op
      from settle_private.operations o
     where o.tenant = new.tenant and o.key = new.key;
    if not found then
      perform settle_private._raise_reference('attempts_belong_to_operation', new.tenant, new.key, new.attempt);
    end if;
    if v_op.attempt is distinct from new.attempt or v_op.attempt_token is distinct from new.lease_token
       or v_op.worker is distinct from new.worker or v_op.claimed_at is distinct from new.claimed_at
       or v_op.claimed_by is distinct from new.claimed_by or v_op.claim_seq is distinct from new.claim_seq
       or v_op.claim_audit_id is distinct from new.claim_audit_id
       or v_op.claim_status_before is distinct from new.claim_status_before
       or v_op.claim_status_after is distinct from new.claim_status_after then
      perform settle_private._raise_reference('attempts_record_the_current_attempt', new.tenant, new.key, new.attempt);
    end if;
  elsif new.observation is distinct from old.observation
        and exists (select 1 from settle_private.operations o
                     where o.tenant = new.tenant and o.key = new.key and o.settled_attempt = new.attempt) then
    raise exception using
      errcode = 'SE024',
      message = 'an attempt holds at most one terminal observation',
      detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'attempt', new.attempt, 'observation', 'completed')::text,
      hint = 'The attempt that settled the operation observed completed: a second success of it is a duplicate.';
  end if;
  return new;
end
$$;

ALTER FUNCTION settle_private.tg_attempts__guard_record() OWNER TO settle_owner;

--
-- Name: tg_audit_log__refuse_change(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_audit_log__refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  raise exception using
    errcode = 'SE023',
    message = format('the audit log is append-only (%s refused)', tg_op),
    hint = 'Audit rows are removed only by settle.purge together with their operation.';
end
$$;

ALTER FUNCTION settle_private.tg_audit_log__refuse_change() OWNER TO settle_owner;

--
-- Name: tg_feed_consumers__drop_lanes(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_feed_consumers__drop_lanes() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
begin
  delete from settle_private.feed_lanes l where l.consumer = old.name;
  return null;
end
$$;

ALTER FUNCTION settle_private.tg_feed_consumers__drop_lanes() OWNER TO settle_owner;

--
-- Name: tg_feed_lanes__guard_consumer(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_feed_lanes__guard_consumer() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

ALTER FUNCTION settle_private.tg_feed_lanes__guard_consumer() OWNER TO settle_owner;

--
-- Name: tg_operations__guard(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_operations__guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
declare
  v_redrive boolean;
  v_rule text;
  v_previous xid8;
  v_wake boolean;
begin
  if tg_op = 'INSERT' then
    -- Who made the claim of the first attempt: the authenticated login, never the writer's word.
    -- The engine's own statements write session_user, so NEW is assigned only when a writer
    -- passed something else (or nothing): a PL/pgSQL assignment to a field of NEW expands the
    -- row and forms a new tuple at RETURN (docs/performance.md).
    if new.claimed_by is distinct from session_user::text then
      new.claimed_by := session_user::text;
    end if;
    if new.status not in ('pending', 'running') or new.result is not null or new.settled_attempt is not null
       or new.settled_seq is not null or new.settled_by is not null
       or new.error is not null or new.dead_lettered_at is not null or new.dead_letter_reason is not null
       or new.redrive_count <> 0 then
      raise exception using
        errcode = 'SE021',
        message = 'a new operation must start unsettled (pending or running, no result, no error)',
        detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'status', new.status)::text,
        hint = 'Create operations with settle.claim.';
    end if;
    -- The rules on the reservation lock's columns, which no UPDATE may change (_050_guard_lock).
    v_rule := case
      when not (octet_length(new.tenant) between 1 and settle_private._limit('tenant_bytes')) then 'tenant_length_in_range'
      when not (octet_length(new.key) between 1 and settle_private._limit('key_bytes')) then 'key_length_in_range'
      when not (octet_length(new.principal) between 1 and settle_private._limit('principal_bytes')) then 'principal_length_in_range'
      -- '^v1:[0-9a-f]{64}$' as a regex without the counted repetition (which PostgreSQL's regex
      -- engine expands into 64 states, built again on every match: ~10x the cost) and a length.
      when not (new.fingerprint ~ '^v1:[0-9a-f]+$' and octet_length(new.fingerprint) = 67) then 'fingerprint_is_versioned'
      when not (new.binding_generation >= 0) then 'binding_generation_not_negative'
      -- The rules below that a row starting unsettled (checked above) can break; the others
      -- (a terminal status, a result, a settlement, an error, a dead letter, a redrive count)
      -- hold trivially for it, so an INSERT does not set them up.
      when not (new.attempt >= 1 and new.attempt <= new.max_attempts) then 'attempt_within_budget'
      when not ((new.lease_token is null) = (new.lease_expires_at is null)) then 'lease_token_iff_lease_expiry'
      when not (new.lease_token is null or new.lease_token = new.attempt_token) then 'lease_is_the_current_attempts'
      when not (new.status <> 'pending' or new.lease_token is null) then 'pending_is_unleased'
      when not (new.status <> 'running' or new.lease_token is not null) then 'running_is_leased'
      when not ((new.claim_seq is null) = (new.claim_audit_id is null)
                and (new.claim_seq is null) = (new.claim_status_after is null)) then 'claim_log_complete'
    end;
    if v_rule is not null then
      perform settle_private._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
    end if;
    return new;
  else
    -- The rules of earlier states, behind one test that the settling UPDATE (running to
    -- completed, epochs unchanged) fails: a completed result, a move down the lattice, an
    -- attempt epoch or redrive generation going back.
    if old.status = 'completed' or (new.status < old.status) is not false
       or new.attempt < old.attempt or new.redrive_count < old.redrive_count then
      if old.status = 'completed' then
        if new.result is distinct from old.result or new.settled_attempt is distinct from old.settled_attempt
           or new.settled_at is distinct from old.settled_at or new.settled_seq is distinct from old.settled_seq
           or new.settled_audit_id is distinct from old.settled_audit_id
           or new.settled_status_before is distinct from old.settled_status_before
           or new.settled_reason is distinct from old.settled_reason or new.settled_by is distinct from old.settled_by then
          raise exception using
            errcode = 'SE022',
            message = 'the result of a completed operation is immutable',
            detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'settled_attempt', old.settled_attempt)::text,
            hint = 'A completed result is written once, with the move to completed.';
        end if;
      end if;

      -- A move down the lattice. settle.status is declared in lattice order, so only a move to a
      -- lower label can be one (NULL too: the NOT NULL constraint comes after this trigger);
      -- running to pending is not (both rank 1). The only permitted move down: settle.redrive
      -- re-opening a dead-lettered failure as a new redrive generation, and only when every
      -- attempt recorded a failure (attempts_exhausted). An operation where an attempt may have
      -- taken effect is never lowered below unknown, by redrive or anything else.
      if (new.status < old.status) is not false then
        v_redrive := old.status = 'failed' and old.dead_letter_reason = 'attempts_exhausted'
          and new.status = 'pending' and new.dead_lettered_at is null
          and new.redrive_count = old.redrive_count + 1;
        if v_redrive and settle_private._may_have_taken_effect(old.tenant, old.key, old.status, old.attempt) then
          v_redrive := false;
        end if;

        if settle_private._rank(new.status) < settle_private._rank(old.status) and not v_redrive then
          raise exception using
            errcode = 'SE021',
            message = format('status may not move down the lattice from %s to %s', old.status, new.status),
            detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'from', old.status, 'to', new.status)::text,
            hint = 'Statuses only move up: pending/running < unknown < conflict < failed < completed. Dead letters are re-opened with settle.redrive.';
        end if;
      end if;

      if new.attempt < old.attempt or new.redrive_count < old.redrive_count then
        raise exception using
          errcode = 'SE021',
          message = 'attempt epochs and redrive generations never go back',
          detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'new_attempt', new.attempt)::text;
      end if;
    end if;
  end if;

  v_rule := case
    when not (new.attempt >= 1 and new.attempt <= new.max_attempts) then 'attempt_within_budget'
    when not ((new.lease_token is null) = (new.lease_expires_at is null)) then 'lease_token_iff_lease_expiry'
    when not (new.lease_token is null or new.lease_token = new.attempt_token) then 'lease_is_the_current_attempts'
    when not (new.status <> 'pending' or new.lease_token is null) then 'pending_is_unleased'
    when not (new.status <> 'running' or new.lease_token is not null) then 'running_is_leased'
    when not (new.status not in ('failed', 'completed') or new.lease_token is null) then 'terminal_is_unleased'
    when not ((new.status = 'completed') = (new.result is not null)) then 'completed_has_result'
    when not ((new.status = 'completed') = (new.settled_attempt is not null and new.settled_at is not null))
      then 'completed_has_settlement'
    when not (new.settled_attempt is null or new.settled_attempt between 1 and new.attempt) then 'settled_attempt_was_opened'
    when not ((new.settled_attempt is null) = (new.settled_seq is null) and (new.settled_seq is null) = (new.settled_audit_id is null)
              and (new.settled_seq is null) = (new.settled_reason is null)) then 'settlement_is_logged'
    when not (new.status <> 'failed' or new.error is not null) then 'failed_has_error'
    when not ((new.dead_lettered_at is null) = (new.dead_letter_reason is null)) then 'dead_letter_has_reason'
    when not (new.dead_lettered_at is null or new.lease_token is null) then 'dead_letter_is_unleased'
    when not (new.dead_letter_reason is null
              or (new.dead_letter_reason = 'attempts_exhausted' and new.status = 'failed')
              or (new.dead_letter_reason = 'needs_reconciliation' and new.status in ('unknown', 'conflict')))
      then 'dead_letter_reason_fits_status'
    when not (new.redrive_count >= 0) then 'redrive_count_not_negative'
  end;
  if v_rule is not null then
    perform settle_private._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
  end if;

  -- The settlement (settled_attempt set: completed, a row rule above): the login that settled it
  -- is the authenticated login, never the writer's word (assigned only when a writer passed
  -- something else, as at INSERT), and the settled attempt holds no other terminal observation
  -- (the attempt-scoped settlement lock: an attempt that failed or presented a mismatched lock,
  -- or whose success came too late, never settles; one that reported unknown may). The current
  -- attempt of a settling UPDATE has no record in the common case: the read finds nothing.
  if new.settled_attempt is not null and old.settled_attempt is null then
    if new.settled_by is distinct from session_user::text then
      new.settled_by := session_user::text;
    end if;
    if exists (select 1 from settle_private.attempts a
                where a.tenant = new.tenant and a.key = new.key and a.attempt = new.settled_attempt
                  and a.observation in ('conflict', 'failed', 'completed')) then
      raise exception using
        errcode = 'SE024',
        message = 'an attempt holds at most one terminal observation',
        detail = jsonb_build_object('tenant', new.tenant, 'key', new.key, 'attempt', new.settled_attempt)::text,
        hint = 'Attempt-scoped settlement locks: an attempt that recorded another outcome never settles.';
    end if;
  end if;

  -- `failed` means a committed failure: no attempt may have taken effect (every attempt
  -- recorded a failure, and the operation never reached unknown or conflict). A final failure
  -- or a spent budget after an attempt that may have taken effect (it reported unknown,
  -- conflicted, or its lease lapsed without an observation) is a dead letter that needs
  -- reconciliation, never `failed`. It reads the attempts, so it is checked
  -- after the row rules, and only on a move to failed. (It was a trigger of its own,
  -- _995_guard_failure, with a WHEN clause: PostgreSQL 15 reads back and plans a trigger's WHEN
  -- clause for every UPDATE statement, which cost more than this test; docs/performance.md.)
  -- The one audited exception: an operator's resolution (settle.resolve, 00014) asserting with
  -- evidence that no effect happened, recognised by its audit row written in this very
  -- transaction.
  -- (An INSERT has returned above: this is an UPDATE.)
  if new.status = 'failed' and old.status <> 'failed' then
    if settle_private._may_have_taken_effect(new.tenant, new.key, old.status, old.attempt)
       and not settle_private._resolving_failed(new.tenant, new.key) then
      raise exception using
        errcode = 'SE021',
        message = 'status may move to failed only on a committed failure',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'from', old.status, 'to', new.status)::text,
        hint = 'An attempt may have taken effect: the operation stays unknown (or conflict) and is dead-lettered with reason needs_reconciliation.';
    end if;
  end if;

  -- The settlement feed (00013): a move into completed or failed, once every rule above has
  -- accepted the row, writes its feed event in the same statement, whoever the writer. Here
  -- rather than in a trigger of its own: one PL/pgSQL trigger call per settling UPDATE, not
  -- two (each call sets up its frame and expressions again in every transaction). A key has a
  -- second final outcome only after a failure (failed, then redriven or completed by a late
  -- success): only then is its previous event read, to keep the key's events in order
  -- (position_xid never below the previous event's). The waiters are read in the statement that
  -- writes the event.
  if new.status in ('completed', 'failed') and new.status is distinct from old.status then
    if old.status = 'failed' or new.redrive_count > 0 then
      select e.position_xid into v_previous from settle_private.feed_events e
       where e.tenant = new.tenant and e.key = new.key and e.status = 'failed'
       order by e.event_id desc limit 1;
    end if;
    insert into settle_private.feed_events
      (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt, result, error,
       dead_letter_reason, redrive_count, occurred_at)
    values (new.tenant, new.key, greatest(pg_current_xact_id(), v_previous), pg_current_xact_id(), hashtext(new.key),
            new.status, old.status, coalesce(new.settled_attempt, new.attempt), new.result, new.error,
            new.dead_letter_reason, new.redrive_count, new.updated_at)
    returning exists (select 1 from settle_private.feed_waiters w where w.until > now()) into v_wake;
    if v_wake then
      perform pg_notify('settle_feed', '');
    end if;
  end if;
  return new;
end
$_$;

ALTER FUNCTION settle_private.tg_operations__guard() OWNER TO settle_owner;

--
-- Name: tg_operations__guard_attempt(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_operations__guard_attempt() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if new.attempt = old.attempt then
    if new.attempt_token is distinct from old.attempt_token or new.worker is distinct from old.worker
       or new.claimed_at is distinct from old.claimed_at or new.claimed_by is distinct from old.claimed_by
       or new.claim_seq is distinct from old.claim_seq or new.claim_audit_id is distinct from old.claim_audit_id
       or new.claim_status_before is distinct from old.claim_status_before
       or new.claim_status_after is distinct from old.claim_status_after then
      raise exception using
        errcode = 'SE024',
        message = 'the identity, end and log of an attempt are immutable',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt)::text;
    end if;
  elsif new.attempt > old.attempt then
    if new.attempt_token = old.attempt_token
       or not exists (select 1 from settle_private.attempts a
                       where a.tenant = old.tenant and a.key = old.key and a.attempt = old.attempt
                         and a.lease_token = old.attempt_token) then
      raise exception using
        errcode = 'SE024',
        message = 'a new attempt epoch needs a token of its own and the record of the attempt it supersedes',
        detail = jsonb_build_object('tenant', old.tenant, 'key', old.key, 'attempt', old.attempt, 'new_attempt', new.attempt)::text,
        hint = 'Attempt epochs are opened by settle.claim.';
    end if;
    if new.claimed_by is distinct from session_user::text then
      new.claimed_by := session_user::text;
    end if;
  end if;
  return new;
end
$$;

ALTER FUNCTION settle_private.tg_operations__guard_attempt() OWNER TO settle_owner;

--
-- Name: tg_operations__guard_lock(); Type: FUNCTION; Schema: settle_private; Owner: settle_owner
--

CREATE FUNCTION settle_private.tg_operations__guard_lock() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.fingerprint is distinct from old.fingerprint or new.request is distinct from old.request
     or new.principal is distinct from old.principal or new.scopes is distinct from old.scopes
     or new.binding_generation is distinct from old.binding_generation
     or new.created_at is distinct from old.created_at then
    raise exception using
      errcode = 'SE020',
      message = 'the reservation lock of an operation is immutable',
      detail = jsonb_build_object('tenant', old.tenant, 'key', old.key)::text,
      hint = 'Tenant, key, request, fingerprint and authorization binding are fixed at first claim; use a new key for a new intent.';
  end if;
  return new;
end
$$;

ALTER FUNCTION settle_private.tg_operations__guard_lock() OWNER TO settle_owner;

--
-- Name: admin_log; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.admin_log (
    log_id bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    event text NOT NULL,
    actor text NOT NULL,
    detail jsonb NOT NULL,
    CONSTRAINT admin_event_is_known CHECK ((event = ANY (ARRAY['grant_tenant'::text, 'revoke_tenant'::text, 'revoke_binding'::text, 'set_purge_min_retention'::text, 'set_retention'::text, 'set_upkeep_interval'::text, 'set_in_doubt_after'::text, 'register_consumer'::text, 'drop_consumer'::text, 'reset_consumer'::text])))
);

ALTER TABLE ONLY settle_private.admin_log FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.admin_log OWNER TO settle_owner;

--
-- Name: TABLE admin_log; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.admin_log IS 'Append-only log of administrative changes: tenant grants and revocations, binding revocations, engine settings, feed consumers. UPDATE, DELETE and TRUNCATE are refused.';

--
-- Name: admin_log; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.admin_log AS
 SELECT l.log_id,
    l.at,
    l.event,
    l.actor,
        CASE
            WHEN ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (NOT (l.detail ? 'tenants'::text))) THEN l.detail
            ELSE (l.detail || jsonb_build_object('tenants', ( SELECT COALESCE(jsonb_agg(t.value), '[]'::jsonb) AS "coalesce"
               FROM jsonb_array_elements_text(
                    CASE jsonb_typeof((l.detail -> 'tenants'::text))
                        WHEN 'array'::text THEN (l.detail -> 'tenants'::text)
                        ELSE '[]'::jsonb
                    END) t(value)
              WHERE (t.value = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])))))
        END AS detail
   FROM settle_private.admin_log l
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR ((l.detail ->> 'tenant'::text) = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.admin_log OWNER TO settle_owner;

--
-- Name: VIEW admin_log; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.admin_log IS 'Append-only log of changes to access: tenant grants and revocations (settle.grant_tenant, settle.revoke_tenant), binding revocations (settle.revoke_binding) and the minimum retention (settle.set_purge_min_retention), with who made them. A login bound to tenants sees only the changes naming one of its tenants.';

--
-- Name: attempts; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.attempts (
    tenant text NOT NULL,
    key text NOT NULL,
    attempt integer NOT NULL,
    lease_token uuid NOT NULL,
    worker text,
    claimed_at timestamp with time zone NOT NULL,
    claimed_by text,
    claim_seq bigint,
    claim_audit_id bigint,
    claim_status_before settle.status,
    claim_status_after settle.status,
    ended_at timestamp with time zone,
    end_reason text,
    observation settle.status,
    observed_at timestamp with time zone,
    retryable boolean,
    error jsonb,
    late_result jsonb
)
WITH (fillfactor='80');

ALTER TABLE ONLY settle_private.attempts FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.attempts OWNER TO settle_owner;

--
-- Name: TABLE attempts; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.attempts IS 'The record of each attempt epoch that ended, was observed or was superseded: its lease token, worker and claim log (claim_*) as its operation held them, its end and its own attempt-scoped terminal observation. The current attempt of an operation is on the operation row until then; settle.attempts shows every attempt, the settlement included. Private: use the settle API.';

--
-- Name: attempts; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.attempts AS
 SELECT x.tenant,
    x.key,
    x.attempt,
    x.worker,
    x.claimed_at,
        CASE
            WHEN s.settled THEN COALESCE(x.ended_at, o.settled_at)
            ELSE x.ended_at
        END AS ended_at,
        CASE
            WHEN s.settled THEN COALESCE(x.end_reason, 'observed'::text)
            ELSE x.end_reason
        END AS end_reason,
        CASE
            WHEN s.settled THEN 'completed'::settle.status
            ELSE x.observation
        END AS observation,
        CASE
            WHEN s.settled THEN o.settled_at
            ELSE x.observed_at
        END AS observed_at,
        CASE
            WHEN s.settled THEN NULL::boolean
            ELSE x.retryable
        END AS retryable,
        CASE
            WHEN s.settled THEN NULL::jsonb
            ELSE x.error
        END AS error,
    x.late_result,
    s.settled
   FROM ((( SELECT a.tenant,
            a.key,
            a.attempt,
            a.worker,
            a.claimed_at,
            a.ended_at,
            a.end_reason,
            a.observation,
            a.observed_at,
            a.retryable,
            a.error,
            a.late_result
           FROM settle_private.attempts a
        UNION ALL
         SELECT c.tenant,
            c.key,
            c.attempt,
            c.worker,
            c.claimed_at,
            NULL::timestamp with time zone,
            NULL::text,
            NULL::settle.status,
            NULL::timestamp with time zone,
            NULL::boolean,
            NULL::jsonb,
            NULL::jsonb
           FROM settle_private.operations c
          WHERE (NOT (EXISTS ( SELECT 1
                   FROM settle_private.attempts r
                  WHERE ((r.tenant = c.tenant) AND (r.key = c.key) AND (r.attempt = c.attempt)))))) x
     JOIN settle_private.operations o ON (((o.tenant = x.tenant) AND (o.key = x.key))))
     CROSS JOIN LATERAL ( SELECT COALESCE((o.settled_attempt = x.attempt), false) AS settled) s)
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (x.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.attempts OWNER TO settle_owner;

--
-- Name: VIEW attempts; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.attempts IS 'Every attempt epoch with its attempt-scoped settlement: observation (unknown/conflict/failed/completed), whether it was THE settlement (settled), and any late success (late_result). Lease tokens are never shown.';

--
-- Name: audit_log; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.audit_log (
    tenant text NOT NULL,
    key text NOT NULL,
    seq bigint NOT NULL,
    audit_id bigint NOT NULL,
    at timestamp with time zone NOT NULL,
    event settle_private.audit_event NOT NULL,
    outcome text NOT NULL,
    attempt integer,
    status_before settle.status,
    status_after settle.status,
    actor text,
    detail jsonb,
    login text
);

ALTER TABLE ONLY settle_private.audit_log FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.audit_log OWNER TO settle_owner;

--
-- Name: TABLE audit_log; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.audit_log IS 'Append-only audit trail, one row per claim (but none for the read-only answers replay and in_progress, and none for a claim that opened an attempt: that one is logged on its attempt), observation (but none for the success that settled: logged on its operation), fence, conflict, expiry, redrive and purge, written in the same transaction. settle.audit_log shows both in one order. UPDATE, DELETE (outside settle.purge) and TRUNCATE are refused.';

--
-- Name: audit_log; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.audit_log AS
 SELECT e.tenant,
    e.key,
    e.seq,
    e.audit_id,
    e.at,
    e.event,
    e.outcome,
    e.attempt,
    e.status_before,
    e.status_after,
    e.actor,
    e.detail,
    e.login
   FROM ( SELECT l.tenant,
            l.key,
            l.seq,
            l.audit_id,
            l.at,
            (l.event)::text AS event,
            l.outcome,
            l.attempt,
            l.status_before,
            l.status_after,
            l.actor,
            l.detail,
            l.login
           FROM settle_private.audit_log l
        UNION ALL
         SELECT a.tenant,
            a.key,
            a.claim_seq,
            a.claim_audit_id,
            a.claimed_at,
            'claim'::text,
            'acquired'::text,
            a.attempt,
            a.claim_status_before,
            a.claim_status_after,
            a.worker,
                CASE
                    WHEN (a.claim_status_before IS NULL) THEN '{"reserved": true}'::jsonb
                    ELSE NULL::jsonb
                END AS "case",
            a.claimed_by
           FROM settle_private.attempts a
          WHERE (a.claim_seq IS NOT NULL)
        UNION ALL
         SELECT o.tenant,
            o.key,
            o.claim_seq,
            o.claim_audit_id,
            o.claimed_at,
            'claim'::text,
            'acquired'::text,
            o.attempt,
            o.claim_status_before,
            o.claim_status_after,
            o.worker,
                CASE
                    WHEN (o.claim_status_before IS NULL) THEN '{"reserved": true}'::jsonb
                    ELSE NULL::jsonb
                END AS "case",
            o.claimed_by
           FROM settle_private.operations o
          WHERE ((o.claim_seq IS NOT NULL) AND (NOT (EXISTS ( SELECT 1
                   FROM settle_private.attempts r
                  WHERE ((r.tenant = o.tenant) AND (r.key = o.key) AND (r.attempt = o.attempt))))))
        UNION ALL
         SELECT o.tenant,
            o.key,
            o.settled_seq,
            o.settled_audit_id,
            o.settled_at,
            'complete'::text,
            'settled'::text,
            o.settled_attempt,
            o.settled_status_before,
            'completed'::settle.status AS status,
                CASE
                    WHEN (o.settled_attempt = o.attempt) THEN o.worker
                    ELSE ( SELECT r.worker
                       FROM settle_private.attempts r
                      WHERE ((r.tenant = o.tenant) AND (r.key = o.key) AND (r.attempt = o.settled_attempt)))
                END AS worker,
            jsonb_build_object('reason', o.settled_reason) AS jsonb_build_object,
            o.settled_by
           FROM settle_private.operations o
          WHERE (o.settled_seq IS NOT NULL)) e
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (e.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.audit_log OWNER TO settle_owner;

--
-- Name: VIEW audit_log; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.audit_log IS 'Append-only audit trail: one row per claim (except the read-only answers replay and in_progress, which write nothing), fenced heartbeat, observation, expiry, redrive and purge, ordered per key by (seq, audit_id). The rows claim:acquired and complete:settled come from the operation and attempt rows that log them (claim_* and settled_*), the others from settle_private.audit_log. seq numbers an operation''s events 1, 2, 3 ... without any global sequence (audit_id alone is not an order on Citus). Transitions are serialized by the operation row lock, so their rows are consecutive, in commit order; claims answered without a change (conflict, failed) take no row lock and may interleave with a concurrent transition. actor is what the caller supplied (a claim''s worker) or the admin login; login is always the authenticated login role (session_user) of the call. Of the refused, fenced and conflicting calls, a key keeps the first 20 here in full; the rest are counted in settle.audit_overflow.';

--
-- Name: audit_overflow; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.audit_overflow (
    tenant text NOT NULL,
    key text NOT NULL,
    refusals bigint NOT NULL,
    first_at timestamp with time zone NOT NULL,
    last_at timestamp with time zone NOT NULL,
    last_event text NOT NULL,
    last_outcome text NOT NULL,
    last_login text,
    last_actor text,
    digest bytea NOT NULL
);

ALTER TABLE ONLY settle_private.audit_overflow FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.audit_overflow OWNER TO settle_owner;

--
-- Name: TABLE audit_overflow; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.audit_overflow IS 'Per key, the refused, fenced and conflicting calls beyond the first 20 kept in full in audit_log: their count, first and last time, the last one''s event, outcome, login and actor, and a chained SHA-256 of their details. Private: read settle.audit_overflow.';

--
-- Name: audit_overflow; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.audit_overflow AS
 SELECT x.tenant,
    x.key,
    x.refusals,
    x.first_at,
    x.last_at,
    x.last_event,
    x.last_outcome,
    x.last_login,
    x.last_actor,
    encode(x.digest, 'hex'::text) AS digest
   FROM settle_private.audit_overflow x
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (x.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.audit_overflow OWNER TO settle_owner;

--
-- Name: VIEW audit_overflow; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.audit_overflow IS 'Evidence beyond the bound: per key, the refused, fenced and conflicting calls after the first 20 kept in full in settle.audit_log, counted (refusals), with the first and last time, the last call''s event, outcome, authenticated login and caller-supplied actor, and digest, a SHA-256 chained over each folded row''s detail (sha256(previous || sha256(detail))). Removed with its key by settle.purge.';

--
-- Name: dead_letters; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.dead_letters AS
 SELECT o.tenant,
    o.key,
    o.attempt,
    o.max_attempts,
    o.error,
    o.dead_lettered_at,
    o.redrive_count,
    o.created_at,
    o.updated_at,
    o.dead_letter_reason AS reason,
    o.status
   FROM settle_private.operations o
  WHERE ((o.dead_lettered_at IS NOT NULL) AND ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (o.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[]))));

ALTER TABLE settle.dead_letters OWNER TO settle_owner;

--
-- Name: VIEW dead_letters; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.dead_letters IS 'Operations that spent their attempt budget without a settled outcome. reason attempts_exhausted: every attempt recorded a failure (status failed); settle.redrive re-opens it. reason needs_reconciliation: an attempt may have taken effect (status unknown or conflict): check the downstream system first; a matching success still settles it, settle.redrive re-opens it without lowering its status. Neither is purged while dead-lettered.';

--
-- Name: feed_consumers; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.feed_consumers AS
 SELECT f.consumer,
    f.tenants,
    f.lanes,
    f.lane,
    (((f.position_xid)::text || '/'::text) || f.position_id) AS "position",
    f.leased,
    f.lease_expires_at,
    f.acked_at,
    f.lag_events,
    f.oldest_unacked_at,
    f.lag_seconds
   FROM settle_private._feed_lag() f(consumer, tenants, lanes, lane, position_xid, position_id, leased, lease_expires_at, acked_at, lag_events, oldest_unacked_at, lag_seconds);

ALTER TABLE settle.feed_consumers OWNER TO settle_owner;

--
-- Name: VIEW feed_consumers; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.feed_consumers IS 'One row per lane of each registered feed consumer: its position (position_xid/event_id), whether a process holds its lease and until when, when it last acknowledged, and its lag: events written beyond the position (committed or not yet visible; counted up to 1,000 in each of the lane''s key slots, a lane having 64/lanes slots) and the age of the oldest of them in seconds. A lag in seconds that grows while lag_events stays small means a long transaction holds the horizon back: settle.feed_horizon names it (docs/feed.md).';

--
-- Name: feed_events; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.feed_events (
    tenant text NOT NULL,
    key text NOT NULL,
    event_id bigint NOT NULL,
    position_xid xid8 NOT NULL,
    xid xid8 NOT NULL,
    lane_hash integer NOT NULL,
    status settle.status NOT NULL,
    status_before settle.status NOT NULL,
    attempt integer NOT NULL,
    result jsonb,
    error jsonb,
    dead_letter_reason text,
    redrive_count integer NOT NULL,
    occurred_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY settle_private.feed_events FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.feed_events OWNER TO settle_owner;

--
-- Name: TABLE feed_events; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.feed_events IS 'The settlement feed: one row per move of an operation into completed or failed, written in the same transaction by the guard trigger _100_guard_lattice of operations. Ordered by (position_xid, event_id). Private: read it with settle.read_feed.';

--
-- Name: feed_lanes; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.feed_lanes (
    consumer text NOT NULL,
    lane integer NOT NULL,
    position_xid xid8 NOT NULL,
    position_id bigint NOT NULL,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    leased_through_xid xid8,
    leased_through_id bigint,
    acked_at timestamp with time zone,
    CONSTRAINT lease_is_whole CHECK ((((lease_token IS NULL) = (lease_expires_at IS NULL)) AND ((lease_token IS NULL) = (leased_through_xid IS NULL)) AND ((lease_token IS NULL) = (leased_through_id IS NULL))))
);

ALTER TABLE ONLY settle_private.feed_lanes FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.feed_lanes OWNER TO settle_owner;

--
-- Name: TABLE feed_lanes; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.feed_lanes IS 'Position and lease of each lane of each consumer. Private: moved by settle.read_feed, settle.ack_feed and settle.reset_consumer.';

--
-- Name: feed_events; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.feed_events AS
 SELECT e.tenant,
    e.key,
    e.event_id,
    (((e.position_xid)::text || '/'::text) || e.event_id) AS "position",
    e.status,
    e.status_before,
    e.attempt,
    e.occurred_at,
    ARRAY( SELECT c.name
           FROM (settle_private.feed_consumers c
             JOIN settle_private.feed_lanes l ON ((l.consumer = c.name)))
          WHERE (settle_private._feed_in_lane(e.lane_hash, e.tenant, c.lanes, l.lane, c.tenants) AND (ROW(l.position_xid, l.position_id) >= ROW(e.position_xid, e.event_id)) AND ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (c.tenants <@ ( SELECT settle_private._visible_tenants() AS _visible_tenants))))
          ORDER BY c.name) AS acked_by,
    ARRAY( SELECT c.name
           FROM (settle_private.feed_consumers c
             JOIN settle_private.feed_lanes l ON ((l.consumer = c.name)))
          WHERE (settle_private._feed_in_lane(e.lane_hash, e.tenant, c.lanes, l.lane, c.tenants) AND (ROW(l.position_xid, l.position_id) < ROW(e.position_xid, e.event_id)) AND ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (c.tenants <@ ( SELECT settle_private._visible_tenants() AS _visible_tenants))))
          ORDER BY c.name) AS pending_for
   FROM settle_private.feed_events e
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (e.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])));

ALTER TABLE settle.feed_events OWNER TO settle_owner;

--
-- Name: VIEW feed_events; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.feed_events IS 'The retained settlement-feed events (one per move of an operation into completed or failed) with their feed position (position_xid/event_id), and per event the registered consumers whose lane has passed it (acked_by: acknowledged, or skipped by a reset) and those that still have to deliver it (pending_for). Events every consumer has passed are removed by settle.trim_feed. A lookup by tenant and key scans the retained events.';

--
-- Name: feed_horizon; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.feed_horizon AS
 SELECT h.pid,
    h.login,
    h.application_name,
    h.state,
    h.xid,
    h.xid_age,
    h.xact_age_seconds,
    h.holds_horizon,
    h.feed_consumer,
    h.consumer,
    h.lane
   FROM settle_private._feed_horizon_holders() h(pid, login, application_name, state, xid, xid_age, xact_age_seconds, holds_horizon, feed_consumer, consumer, lane);

ALTER TABLE settle.feed_horizon OWNER TO settle_owner;

--
-- Name: VIEW feed_horizon; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.feed_horizon IS 'The transactions that hold the settlement feed''s horizon back, oldest first (at most 100): every session of the cluster with a transaction id, and every prepared transaction (pid NULL). holds_horizon: this one is the oldest, no consumer receives an event written after it until it ends. feed_consumer: the session holds a lease of a feed consumer''s lane (its read-apply-ack transaction; consumer and lane name it, for a login bound to tenants only a consumer within them). xact_age_seconds and state are NULL where the engine''s owner may not read them (docs/feed.md); login and application_name are NULL for a login bound to tenants.';

--
-- Name: metrics; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.metrics AS
 SELECT m.operations_in_flight,
    m.lapsed_leases,
    m.operations_unknown,
    m.oldest_unknown_age_seconds,
    m.operations_conflict,
    m.dead_letters_failed,
    m.dead_letters_needs_reconciliation,
    m.oldest_dead_letter_age_seconds,
    m.conflicts_recent,
    m.refused_observations_recent,
    m.recent_window_seconds,
    f.feed_consumers,
    f.feed_lag_events,
    f.feed_lag_seconds,
    f.feed_events_retained,
    u.reconciliation_leased,
    u.oldest_needs_reconciliation_age_seconds,
    u.resolutions_recent,
    u.upkeep_jobs_overdue,
    u.upkeep_jobs_failing,
    f.feed_horizon_age_seconds,
    f.feed_horizon_xid_age,
    f.feed_horizon_held_by_consumer,
    u.in_doubt_under_5m,
    u.in_doubt_5m_to_1h,
    u.in_doubt_over_1h
   FROM settle_private._metrics() m(operations_in_flight, lapsed_leases, operations_unknown, oldest_unknown_age_seconds, operations_conflict, dead_letters_failed, dead_letters_needs_reconciliation, oldest_dead_letter_age_seconds, conflicts_recent, refused_observations_recent, recent_window_seconds),
    settle_private._feed_metrics() f(feed_consumers, feed_lag_events, feed_lag_seconds, feed_events_retained, feed_horizon_age_seconds, feed_horizon_xid_age, feed_horizon_held_by_consumer),
    settle_private._upkeep_metrics() u(reconciliation_leased, oldest_needs_reconciliation_age_seconds, resolutions_recent, upkeep_jobs_overdue, upkeep_jobs_failing, in_doubt_under_5m, in_doubt_5m_to_1h, in_doubt_over_1h);

ALTER TABLE settle.metrics OWNER TO settle_owner;

--
-- Name: VIEW metrics; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.metrics IS 'Gauges for monitoring, one row, each read from a partial index or a small table (cheap at any table size): live leases (operations_in_flight), leases past expiry not yet taken over or swept (lapsed_leases), unknown operations and the age in seconds of the least recently touched one, operations in conflict, dead letters by reason (failed: every attempt failed; needs_reconciliation: an attempt may have taken effect) and the oldest dead letter''s age, and in the last recent_window_seconds (300): conflicts and refused observations; the settlement feed (consumers, the largest lag in events and the age of the oldest unacknowledged event, events retained); reconciliation (operations a reconciler holds a lease on, the age of the oldest dead letter needing reconciliation, resolutions in the window); upkeep (jobs overdue, jobs whose last run failed); the feed''s horizon (the age in seconds and in transaction ids of the oldest transaction holding it back, and 1 when a feed consumer''s transaction is that one: settle.feed_horizon names it); operations in doubt (unknown or conflict, not dead-lettered) by how long nobody touched them (under 5 minutes, 5 minutes to 1 hour, over 1 hour): the dead_letter_in_doubt upkeep job dead-letters them for reconciliation after in_doubt_after. docs/observability.md lists every column.';

--
-- Name: settlements; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.settlements AS
 SELECT o.tenant,
    o.key,
    o.settled_attempt AS attempt,
    o.result,
    o.settled_at
   FROM settle_private.operations o
  WHERE ((o.status = 'completed'::settle.status) AND ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (o.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[]))));

ALTER TABLE settle.settlements OWNER TO settle_owner;

--
-- Name: VIEW settlements; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.settlements IS 'Exactly one row per completed operation: the final settlement, written in the same transaction as the move to completed.';

--
-- Name: stats; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.stats AS
 SELECT o.tenant,
    count(*) AS operations,
    count(*) FILTER (WHERE (o.status = 'pending'::settle.status)) AS pending,
    count(*) FILTER (WHERE (o.status = 'running'::settle.status)) AS running,
    count(*) FILTER (WHERE (o.status = 'unknown'::settle.status)) AS unknown,
    count(*) FILTER (WHERE (o.status = 'conflict'::settle.status)) AS conflict,
    count(*) FILTER (WHERE (o.status = 'failed'::settle.status)) AS failed,
    count(*) FILTER (WHERE (o.status = 'completed'::settle.status)) AS completed,
    count(*) FILTER (WHERE (o.dead_lettered_at IS NOT NULL)) AS dead_lettered,
    count(*) FILTER (WHERE (o.dead_letter_reason = 'needs_reconciliation'::text)) AS needs_reconciliation,
    count(*) FILTER (WHERE (o.lease_expires_at > clock_timestamp())) AS in_flight,
    count(*) FILTER (WHERE (o.lease_expires_at <= clock_timestamp())) AS lapsed_leases,
    COALESCE(sum(o.attempt), (0)::bigint) AS attempts
   FROM settle_private.operations o
  WHERE ((( SELECT settle_private._visible_tenants() AS _visible_tenants) IS NULL) OR (o.tenant = ANY (( SELECT settle_private._visible_tenants() AS _visible_tenants)::text[])))
  GROUP BY o.tenant;

ALTER TABLE settle.stats OWNER TO settle_owner;

--
-- Name: VIEW stats; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.stats IS 'Per-tenant counts by status, dead letters (dead_lettered: all; needs_reconciliation: those where an attempt may have taken effect, counted under unknown or conflict, never under failed), live and lapsed leases, and attempts opened.';

--
-- Name: settings; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.settings (
    name text NOT NULL,
    value interval NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT setting_is_known CHECK ((name = ANY (ARRAY['purge_min_retention'::text, 'retention'::text, 'in_doubt_after'::text]))),
    CONSTRAINT setting_not_negative CHECK ((value >= '00:00:00'::interval))
);

ALTER TABLE ONLY settle_private.settings FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.settings OWNER TO settle_owner;

--
-- Name: TABLE settings; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.settings IS 'Engine settings: purge_min_retention (default 24 hours), the shortest older_than settle.purge accepts. Private: change it with settle.set_purge_min_retention (logged in admin_log).';

--
-- Name: upkeep_jobs; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.upkeep_jobs (
    job text NOT NULL,
    every interval NOT NULL,
    created_at timestamp with time zone NOT NULL,
    last_started_at timestamp with time zone,
    last_finished_at timestamp with time zone,
    last_ok boolean,
    last_detail jsonb,
    last_error text,
    last_by text,
    runs bigint DEFAULT 0 NOT NULL,
    failures bigint DEFAULT 0 NOT NULL,
    CONSTRAINT upkeep_every_in_range CHECK (((every >= '00:00:01'::interval) AND (every <= '1 day'::interval))),
    CONSTRAINT upkeep_job_is_known CHECK ((job = ANY (ARRAY['expire_leases'::text, 'dead_letter_in_doubt'::text, 'purge'::text, 'trim_feed'::text])))
);

ALTER TABLE ONLY settle_private.upkeep_jobs FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.upkeep_jobs OWNER TO settle_owner;

--
-- Name: TABLE upkeep_jobs; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.upkeep_jobs IS 'The upkeep jobs settle.run_upkeep runs (expire_leases, dead_letter_in_doubt, purge, trim_feed): how often, and what their last run did. Private: read settle.upkeep.';

--
-- Name: upkeep; Type: VIEW; Schema: settle; Owner: settle_owner
--

CREATE VIEW settle.upkeep AS
 SELECT j.job,
    j.every,
        CASE
            WHEN (j.job = 'purge'::text) THEN ( SELECT s.value
               FROM settle_private.settings s
              WHERE (s.name = 'retention'::text))
            ELSE NULL::interval
        END AS retention,
    j.last_started_at,
    j.last_finished_at,
    j.last_ok,
    j.last_detail,
    j.last_error,
    j.last_by,
    j.runs,
    j.failures,
    COALESCE((j.last_started_at + j.every), j.created_at) AS next_due_at,
    (clock_timestamp() > ((COALESCE(j.last_finished_at, j.created_at) + ((2)::double precision * j.every)) + '00:01:00'::interval)) AS overdue
   FROM settle_private.upkeep_jobs j;

ALTER TABLE settle.upkeep OWNER TO settle_owner;

--
-- Name: VIEW upkeep; Type: COMMENT; Schema: settle; Owner: settle_owner
--

COMMENT ON VIEW settle.upkeep IS 'The upkeep jobs (expire_leases, dead_letter_in_doubt, purge, trim_feed) settle.run_upkeep runs: every (the interval), retention (purge: terminal operations older than this go), the last run (started, finished, ok, detail, error, by whom), runs and failures, next_due_at, and overdue: no run finished within twice the interval plus a minute (nothing runs settle.run_upkeep: schedule it, docs/operations.md "Upkeep").';

--
-- Name: admin_log_log_id_seq; Type: SEQUENCE; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.admin_log ALTER COLUMN log_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME settle_private.admin_log_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: audit_log_audit_id_seq; Type: SEQUENCE; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.audit_log ALTER COLUMN audit_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME settle_private.audit_log_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: binding_floors; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.binding_floors (
    tenant text NOT NULL,
    principal text NOT NULL,
    below_generation bigint NOT NULL,
    revoked_at timestamp with time zone NOT NULL,
    CONSTRAINT below_generation_positive CHECK ((below_generation >= 1))
);

ALTER TABLE ONLY settle_private.binding_floors FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.binding_floors OWNER TO settle_owner;

--
-- Name: TABLE binding_floors; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.binding_floors IS 'Revocation floor per (tenant, principal): binding generations below below_generation are revoked. Only rises. Private: use settle.revoke_binding.';

--
-- Name: feed_events_event_id_seq; Type: SEQUENCE; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.feed_events ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME settle_private.feed_events_event_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: feed_waiters; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE UNLOGGED TABLE settle_private.feed_waiters (
    pid integer NOT NULL,
    consumer text NOT NULL,
    until timestamp with time zone NOT NULL
);

ALTER TABLE ONLY settle_private.feed_waiters FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.feed_waiters OWNER TO settle_owner;

--
-- Name: TABLE feed_waiters; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.feed_waiters IS 'Consumer backends waiting for the next event (settle.await_feed); while one is registered the feed trigger sends NOTIFY settle_feed. A hint only.';

--
-- Name: reconciliation_leases; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.reconciliation_leases (
    tenant text NOT NULL,
    key text NOT NULL,
    lease_token uuid NOT NULL,
    holder text NOT NULL,
    leased_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    checks integer DEFAULT 1 NOT NULL
);

ALTER TABLE ONLY settle_private.reconciliation_leases FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.reconciliation_leases OWNER TO settle_owner;

--
-- Name: TABLE reconciliation_leases; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.reconciliation_leases IS 'Reconciler leases: which process checks which operation needing reconciliation, until when (settle.lease_reconciliation). Private.';

--
-- Name: tenant_bindings; Type: TABLE; Schema: settle_private; Owner: settle_owner
--

CREATE TABLE settle_private.tenant_bindings (
    role_oid oid NOT NULL,
    role_name text NOT NULL,
    tenants text[] NOT NULL,
    bound_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY settle_private.tenant_bindings FORCE ROW LEVEL SECURITY;

ALTER TABLE settle_private.tenant_bindings OWNER TO settle_owner;

--
-- Name: TABLE tenant_bindings; Type: COMMENT; Schema: settle_private; Owner: settle_owner
--

COMMENT ON TABLE settle_private.tenant_bindings IS 'Tenant binding of login roles, by role OID (a rename keeps it) and, fail closed, by the name recorded with it: a login matching a row by OID or by name reaches only the tenants every matching row lists (none when empty). Private: use settle.grant_tenant / settle.revoke_tenant.';

--
-- Name: admin_log admin_log_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.admin_log
    ADD CONSTRAINT admin_log_pkey PRIMARY KEY (log_id);

--
-- Name: attempts attempts_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (tenant, key, attempt);

--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (tenant, key, seq, audit_id);

--
-- Name: audit_overflow audit_overflow_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.audit_overflow
    ADD CONSTRAINT audit_overflow_pkey PRIMARY KEY (tenant, key);

--
-- Name: binding_floors binding_floors_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.binding_floors
    ADD CONSTRAINT binding_floors_pkey PRIMARY KEY (tenant, principal);

--
-- Name: feed_consumers feed_consumers_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.feed_consumers
    ADD CONSTRAINT feed_consumers_pkey PRIMARY KEY (name);

--
-- Name: feed_events feed_events_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.feed_events
    ADD CONSTRAINT feed_events_pkey PRIMARY KEY (position_xid, event_id);

--
-- Name: feed_lanes feed_lanes_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.feed_lanes
    ADD CONSTRAINT feed_lanes_pkey PRIMARY KEY (consumer, lane);

--
-- Name: feed_waiters feed_waiters_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.feed_waiters
    ADD CONSTRAINT feed_waiters_pkey PRIMARY KEY (pid);

--
-- Name: operations operations_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.operations
    ADD CONSTRAINT operations_pkey PRIMARY KEY (tenant, key);

--
-- Name: reconciliation_leases reconciliation_leases_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.reconciliation_leases
    ADD CONSTRAINT reconciliation_leases_pkey PRIMARY KEY (tenant, key);

--
-- Name: settings settings_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.settings
    ADD CONSTRAINT settings_pkey PRIMARY KEY (name);

--
-- Name: tenant_bindings tenant_bindings_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.tenant_bindings
    ADD CONSTRAINT tenant_bindings_pkey PRIMARY KEY (role_oid);

--
-- Name: upkeep_jobs upkeep_jobs_pkey; Type: CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.upkeep_jobs
    ADD CONSTRAINT upkeep_jobs_pkey PRIMARY KEY (job);

--
-- Name: audit_log_refusals_by_at_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX audit_log_refusals_by_at_idx ON settle_private.audit_log USING btree (at, outcome, event) WHERE (outcome = ANY (ARRAY['conflict'::text, 'fenced'::text]));

--
-- Name: audit_log_resolutions_by_at_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX audit_log_resolutions_by_at_idx ON settle_private.audit_log USING btree (at) WHERE (((event)::text = 'resolve'::text) AND (outcome = 'resolved'::text));

--
-- Name: audit_log_tombstones_by_at_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX audit_log_tombstones_by_at_idx ON settle_private.audit_log USING btree (at) WHERE ((event)::text = 'purge'::text);

--
-- Name: feed_events_by_slot_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX feed_events_by_slot_idx ON settle_private.feed_events USING btree ((((lane_hash & 2147483647) % 64)), position_xid, event_id);

--
-- Name: feed_events_failed_by_key_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX feed_events_failed_by_key_idx ON settle_private.feed_events USING btree (tenant, key, event_id) WHERE (status = 'failed'::settle.status);

--
-- Name: operations_by_lease_expiry_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX operations_by_lease_expiry_idx ON settle_private.operations USING btree (lease_expires_at) WHERE (lease_token IS NOT NULL);

--
-- Name: operations_needing_attention_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX operations_needing_attention_idx ON settle_private.operations USING btree (status, updated_at) WHERE ((status = ANY (ARRAY['pending'::settle.status, 'unknown'::settle.status, 'conflict'::settle.status])) OR (dead_lettered_at IS NOT NULL));

--
-- Name: operations_terminal_by_age_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX operations_terminal_by_age_idx ON settle_private.operations USING btree (updated_at) WHERE (status = ANY (ARRAY['failed'::settle.status, 'completed'::settle.status]));

--
-- Name: tenant_bindings_by_role_name_idx; Type: INDEX; Schema: settle_private; Owner: settle_owner
--

CREATE INDEX tenant_bindings_by_role_name_idx ON settle_private.tenant_bindings USING btree (role_name);

--
-- Name: attempts _050_guard_identity; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _050_guard_identity BEFORE UPDATE OF tenant, key, claimed_by, attempt, lease_token, worker, claimed_at, claim_seq, claim_audit_id, claim_status_before, claim_status_after ON settle_private.attempts FOR EACH ROW EXECUTE FUNCTION settle_private.tg_attempts__guard_identity();

ALTER TABLE settle_private.attempts ENABLE ALWAYS TRIGGER _050_guard_identity;

--
-- Name: operations _050_guard_lock; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _050_guard_lock BEFORE UPDATE OF tenant, key, fingerprint, request, principal, scopes, binding_generation, created_at ON settle_private.operations FOR EACH ROW EXECUTE FUNCTION settle_private.tg_operations__guard_lock();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _050_guard_lock;

--
-- Name: operations _060_guard_attempt; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _060_guard_attempt BEFORE UPDATE OF attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_before, claim_status_after ON settle_private.operations FOR EACH ROW EXECUTE FUNCTION settle_private.tg_operations__guard_attempt();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _060_guard_attempt;

--
-- Name: feed_consumers _100_drop_lanes; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_drop_lanes AFTER DELETE ON settle_private.feed_consumers FOR EACH ROW EXECUTE FUNCTION settle_private.tg_feed_consumers__drop_lanes();

ALTER TABLE settle_private.feed_consumers ENABLE ALWAYS TRIGGER _100_drop_lanes;

--
-- Name: feed_lanes _100_guard_consumer; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_guard_consumer BEFORE INSERT OR UPDATE OF consumer ON settle_private.feed_lanes FOR EACH ROW EXECUTE FUNCTION settle_private.tg_feed_lanes__guard_consumer();

ALTER TABLE settle_private.feed_lanes ENABLE ALWAYS TRIGGER _100_guard_consumer;

--
-- Name: operations _100_guard_insert; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_guard_insert BEFORE INSERT ON settle_private.operations FOR EACH ROW EXECUTE FUNCTION settle_private.tg_operations__guard();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _100_guard_insert;

--
-- Name: operations _100_guard_lattice; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_guard_lattice BEFORE UPDATE ON settle_private.operations FOR EACH ROW EXECUTE FUNCTION settle_private.tg_operations__guard();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _100_guard_lattice;

--
-- Name: attempts _100_guard_record; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_guard_record BEFORE INSERT OR UPDATE ON settle_private.attempts FOR EACH ROW EXECUTE FUNCTION settle_private.tg_attempts__guard_record();

ALTER TABLE settle_private.attempts ENABLE ALWAYS TRIGGER _100_guard_record;

--
-- Name: admin_log _100_refuse_update; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_refuse_update BEFORE UPDATE ON settle_private.admin_log FOR EACH ROW EXECUTE FUNCTION settle_private.tg_audit_log__refuse_change();

ALTER TABLE settle_private.admin_log ENABLE ALWAYS TRIGGER _100_refuse_update;

--
-- Name: audit_log _100_refuse_update; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _100_refuse_update BEFORE UPDATE ON settle_private.audit_log FOR EACH ROW EXECUTE FUNCTION settle_private.tg_audit_log__refuse_change();

ALTER TABLE settle_private.audit_log ENABLE ALWAYS TRIGGER _100_refuse_update;

--
-- Name: admin_log _900_refuse_delete; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_delete BEFORE DELETE ON settle_private.admin_log FOR EACH ROW EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.admin_log ENABLE ALWAYS TRIGGER _900_refuse_delete;

--
-- Name: attempts _900_refuse_delete; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_delete BEFORE DELETE ON settle_private.attempts FOR EACH ROW EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.attempts ENABLE ALWAYS TRIGGER _900_refuse_delete;

--
-- Name: audit_log _900_refuse_delete; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_delete BEFORE DELETE ON settle_private.audit_log FOR EACH ROW EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.audit_log ENABLE ALWAYS TRIGGER _900_refuse_delete;

--
-- Name: audit_overflow _900_refuse_delete; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_delete BEFORE DELETE ON settle_private.audit_overflow FOR EACH ROW EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.audit_overflow ENABLE ALWAYS TRIGGER _900_refuse_delete;

--
-- Name: operations _900_refuse_delete; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_delete BEFORE DELETE ON settle_private.operations FOR EACH ROW EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _900_refuse_delete;

--
-- Name: admin_log _900_refuse_truncate; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_truncate BEFORE TRUNCATE ON settle_private.admin_log FOR EACH STATEMENT EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.admin_log ENABLE ALWAYS TRIGGER _900_refuse_truncate;

--
-- Name: attempts _900_refuse_truncate; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_truncate BEFORE TRUNCATE ON settle_private.attempts FOR EACH STATEMENT EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.attempts ENABLE ALWAYS TRIGGER _900_refuse_truncate;

--
-- Name: audit_log _900_refuse_truncate; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_truncate BEFORE TRUNCATE ON settle_private.audit_log FOR EACH STATEMENT EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.audit_log ENABLE ALWAYS TRIGGER _900_refuse_truncate;

--
-- Name: audit_overflow _900_refuse_truncate; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_truncate BEFORE TRUNCATE ON settle_private.audit_overflow FOR EACH STATEMENT EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.audit_overflow ENABLE ALWAYS TRIGGER _900_refuse_truncate;

--
-- Name: operations _900_refuse_truncate; Type: TRIGGER; Schema: settle_private; Owner: settle_owner
--

CREATE TRIGGER _900_refuse_truncate BEFORE TRUNCATE ON settle_private.operations FOR EACH STATEMENT EXECUTE FUNCTION settle_private.tg_any__refuse_delete();

ALTER TABLE settle_private.operations ENABLE ALWAYS TRIGGER _900_refuse_truncate;

--
-- Name: feed_lanes feed_lanes_of_consumer; Type: FK CONSTRAINT; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE ONLY settle_private.feed_lanes
    ADD CONSTRAINT feed_lanes_of_consumer FOREIGN KEY (consumer) REFERENCES settle_private.feed_consumers(name) ON DELETE CASCADE;

--
-- Name: admin_log; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.admin_log ENABLE ROW LEVEL SECURITY;

--
-- Name: attempts; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.attempts ENABLE ROW LEVEL SECURITY;

--
-- Name: audit_log; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.audit_log ENABLE ROW LEVEL SECURITY;

--
-- Name: audit_overflow; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.audit_overflow ENABLE ROW LEVEL SECURITY;

--
-- Name: binding_floors; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.binding_floors ENABLE ROW LEVEL SECURITY;

--
-- Name: feed_consumers; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.feed_consumers ENABLE ROW LEVEL SECURITY;

--
-- Name: feed_events; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.feed_events ENABLE ROW LEVEL SECURITY;

--
-- Name: feed_lanes; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.feed_lanes ENABLE ROW LEVEL SECURITY;

--
-- Name: feed_waiters; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.feed_waiters ENABLE ROW LEVEL SECURITY;

--
-- Name: operations; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.operations ENABLE ROW LEVEL SECURITY;

--
-- Name: admin_log owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.admin_log TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: attempts owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.attempts TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: audit_log owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.audit_log TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: audit_overflow owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.audit_overflow TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: binding_floors owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.binding_floors TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: feed_consumers owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.feed_consumers TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: feed_events owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.feed_events TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: feed_lanes owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.feed_lanes TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: feed_waiters owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.feed_waiters TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: operations owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.operations TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: reconciliation_leases owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.reconciliation_leases TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: settings owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.settings TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: tenant_bindings owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.tenant_bindings TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: upkeep_jobs owner_only; Type: POLICY; Schema: settle_private; Owner: settle_owner
--

CREATE POLICY owner_only ON settle_private.upkeep_jobs TO settle_owner USING (true) WITH CHECK (true);

--
-- Name: reconciliation_leases; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.reconciliation_leases ENABLE ROW LEVEL SECURITY;

--
-- Name: settings; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.settings ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_bindings; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.tenant_bindings ENABLE ROW LEVEL SECURITY;

--
-- Name: upkeep_jobs; Type: ROW SECURITY; Schema: settle_private; Owner: settle_owner
--

ALTER TABLE settle_private.upkeep_jobs ENABLE ROW LEVEL SECURITY;

--
-- Name: SCHEMA settle; Type: ACL; Schema: -; Owner: settle_owner
--

GRANT USAGE ON SCHEMA settle TO settle_app;
GRANT USAGE ON SCHEMA settle TO settle_readonly;
GRANT USAGE ON SCHEMA settle TO settle_admin;
GRANT USAGE ON SCHEMA settle TO settle_consumer;
GRANT USAGE ON SCHEMA settle TO settle_reconciler;

--
-- Name: FUNCTION ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.ack_feed(consumer text, lane integer, lease_token uuid, position_xid xid8, event_id bigint) TO settle_consumer;

--
-- Name: FUNCTION await_feed(consumer text, seconds integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.await_feed(consumer text, seconds integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.await_feed(consumer text, seconds integer) TO settle_consumer;

--
-- Name: FUNCTION claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.claim(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) TO settle_app;

--
-- Name: FUNCTION claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.claim_many(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, rerun_after_unknown boolean) TO settle_app;

--
-- Name: FUNCTION complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.complete(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb) TO settle_app;

--
-- Name: FUNCTION complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.complete_many(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) TO settle_app;

--
-- Name: FUNCTION dead_letter_in_doubt(older_than interval, batch_size integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.dead_letter_in_doubt(older_than interval, batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.dead_letter_in_doubt(older_than interval, batch_size integer) TO settle_admin;

--
-- Name: FUNCTION drop_consumer(name text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.drop_consumer(name text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.drop_consumer(name text) TO settle_admin;

--
-- Name: FUNCTION expire_leases(batch_size integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.expire_leases(batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.expire_leases(batch_size integer) TO settle_admin;

--
-- Name: FUNCTION fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.fail(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, error jsonb, retryable boolean) TO settle_app;

--
-- Name: FUNCTION fingerprint(request jsonb); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.fingerprint(request jsonb) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.fingerprint(request jsonb) TO settle_app;
GRANT ALL ON FUNCTION settle.fingerprint(request jsonb) TO settle_readonly;
GRANT ALL ON FUNCTION settle.fingerprint(request jsonb) TO settle_admin;

--
-- Name: FUNCTION get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.get(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint) TO settle_app;

--
-- Name: FUNCTION grant_tenant(role text, tenant text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.grant_tenant(role text, tenant text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.grant_tenant(role text, tenant text) TO settle_admin;

--
-- Name: FUNCTION heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.heartbeat(tenant text, key text, attempt integer, lease_token uuid, lease interval) TO settle_app;

--
-- Name: FUNCTION status_rank(status settle.status); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.status_rank(status settle.status) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.status_rank(status settle.status) TO settle_app;
GRANT ALL ON FUNCTION settle.status_rank(status settle.status) TO settle_readonly;
GRANT ALL ON FUNCTION settle.status_rank(status settle.status) TO settle_admin;
GRANT ALL ON FUNCTION settle.status_rank(status settle.status) TO settle_reconciler;

--
-- Name: FUNCTION _visible_tenants(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._visible_tenants() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._visible_tenants() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._visible_tenants() TO settle_admin;
GRANT ALL ON FUNCTION settle_private._visible_tenants() TO settle_reconciler;

--
-- Name: TABLE operations; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.operations TO settle_readonly;
GRANT SELECT ON TABLE settle.operations TO settle_admin;
GRANT SELECT ON TABLE settle.operations TO settle_reconciler;

--
-- Name: FUNCTION inspect(tenant text, key text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.inspect(tenant text, key text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.inspect(tenant text, key text) TO settle_readonly;
GRANT ALL ON FUNCTION settle.inspect(tenant text, key text) TO settle_admin;
GRANT ALL ON FUNCTION settle.inspect(tenant text, key text) TO settle_reconciler;

--
-- Name: FUNCTION lease_reconciliation(holder text, lease interval, batch_size integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.lease_reconciliation(holder text, lease interval, batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.lease_reconciliation(holder text, lease interval, batch_size integer) TO settle_reconciler;
GRANT ALL ON FUNCTION settle.lease_reconciliation(holder text, lease interval, batch_size integer) TO settle_admin;

--
-- Name: FUNCTION purge(older_than interval, batch_size integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.purge(older_than interval, batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.purge(older_than interval, batch_size integer) TO settle_admin;

--
-- Name: FUNCTION read_feed(consumer text, batch_size integer, lease interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.read_feed(consumer text, batch_size integer, lease interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.read_feed(consumer text, batch_size integer, lease interval) TO settle_consumer;

--
-- Name: FUNCTION redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.redrive(tenant text, key text, additional_attempts integer, request jsonb, reason text) TO settle_admin;

--
-- Name: FUNCTION register_consumer(name text, tenants text[], lanes integer, start_at text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.register_consumer(name text, tenants text[], lanes integer, start_at text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.register_consumer(name text, tenants text[], lanes integer, start_at text) TO settle_admin;

--
-- Name: FUNCTION release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval) TO settle_reconciler;
GRANT ALL ON FUNCTION settle.release_reconciliation(tenant text, key text, lease_token uuid, retry_after interval) TO settle_admin;

--
-- Name: FUNCTION report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.report_unknown(tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint) TO settle_app;

--
-- Name: FUNCTION reset_consumer(name text, to_time timestamp with time zone, dry_run boolean); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.reset_consumer(name text, to_time timestamp with time zone, dry_run boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.reset_consumer(name text, to_time timestamp with time zone, dry_run boolean) TO settle_admin;

--
-- Name: FUNCTION resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status) TO settle_reconciler;
GRANT ALL ON FUNCTION settle.resolve(tenant text, key text, fingerprint text, expected_attempt integer, outcome text, reason text, result jsonb, error jsonb, evidence jsonb, expected_status settle.status) TO settle_admin;

--
-- Name: FUNCTION revoke_binding(tenant text, principal text, below_generation bigint); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.revoke_binding(tenant text, principal text, below_generation bigint) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.revoke_binding(tenant text, principal text, below_generation bigint) TO settle_admin;

--
-- Name: FUNCTION revoke_tenant(role text, tenant text); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.revoke_tenant(role text, tenant text) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.revoke_tenant(role text, tenant text) TO settle_admin;

--
-- Name: FUNCTION run_upkeep(job text, force boolean); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.run_upkeep(job text, force boolean) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.run_upkeep(job text, force boolean) TO settle_admin;

--
-- Name: FUNCTION set_in_doubt_after(older_than interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.set_in_doubt_after(older_than interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.set_in_doubt_after(older_than interval) TO settle_admin;

--
-- Name: FUNCTION set_purge_min_retention(min_retention interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.set_purge_min_retention(min_retention interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.set_purge_min_retention(min_retention interval) TO settle_admin;

--
-- Name: FUNCTION set_retention(older_than interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.set_retention(older_than interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.set_retention(older_than interval) TO settle_admin;

--
-- Name: FUNCTION set_upkeep_interval(job text, every interval); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.set_upkeep_interval(job text, every interval) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.set_upkeep_interval(job text, every interval) TO settle_admin;

--
-- Name: FUNCTION trim_feed(batch_size integer); Type: ACL; Schema: settle; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle.trim_feed(batch_size integer) FROM PUBLIC;
GRANT ALL ON FUNCTION settle.trim_feed(batch_size integer) TO settle_admin;

--
-- Name: FUNCTION _access(tenant text, principal text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._access(tenant text, principal text) FROM PUBLIC;

--
-- Name: FUNCTION _audit(tenant text, key text, at timestamp with time zone, event text, outcome text, attempt integer, status_before settle.status, status_after settle.status, actor text, detail jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._audit(tenant text, key text, at timestamp with time zone, event text, outcome text, attempt integer, status_before settle.status, status_after settle.status, actor text, detail jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _binding_ascii_ok(principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._binding_ascii_ok(principal text, scopes text[], binding_generation bigint) FROM PUBLIC;

--
-- Name: FUNCTION _binding_ok(principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._binding_ok(principal text, scopes text[], binding_generation bigint) FROM PUBLIC;

--
-- Name: FUNCTION _binding_rows_of(role text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._binding_rows_of(role text) FROM PUBLIC;

--
-- Name: FUNCTION _canonical_json(value jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._canonical_json(value jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _canonical_json_slow(value jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._canonical_json_slow(value jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _check_batch_bytes(field text, bytes bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_batch_bytes(field text, bytes bigint) FROM PUBLIC;

--
-- Name: FUNCTION _check_batch_element(kind text, ordinal bigint, tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, attempt integer, lease_token uuid, fingerprint text, result jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_batch_element(kind text, ordinal bigint, tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer, attempt integer, lease_token uuid, fingerprint text, result jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _check_batch_shape(names text[], cardinalities integer[], dims integer[], lowers integer[], first_nulls bigint[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_batch_shape(names text[], cardinalities integer[], dims integer[], lowers integer[], first_nulls bigint[]) FROM PUBLIC;

--
-- Name: FUNCTION _check_binding(principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_binding(principal text, scopes text[], binding_generation bigint) FROM PUBLIC;

--
-- Name: FUNCTION _check_claim_args(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_claim_args(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) FROM PUBLIC;

--
-- Name: FUNCTION _check_count(value integer, field text, max integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_count(value integer, field text, max integer) FROM PUBLIC;

--
-- Name: FUNCTION _check_json(value jsonb, field text, max_bytes integer, code text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_json(value jsonb, field text, max_bytes integer, code text) FROM PUBLIC;

--
-- Name: FUNCTION _check_lease(lease interval); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_lease(lease interval) FROM PUBLIC;

--
-- Name: FUNCTION _check_login_role(role text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_login_role(role text) FROM PUBLIC;

--
-- Name: FUNCTION _check_name(value text, field text, max_bytes integer, code text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_name(value text, field text, max_bytes integer, code text) FROM PUBLIC;

--
-- Name: FUNCTION _check_observation(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_observation(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) FROM PUBLIC;

--
-- Name: FUNCTION _check_observation_args(tenant text, key text, attempt integer, lease_token uuid); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_observation_args(tenant text, key text, attempt integer, lease_token uuid) FROM PUBLIC;

--
-- Name: FUNCTION _check_operation_key(tenant text, key text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_operation_key(tenant text, key text) FROM PUBLIC;

--
-- Name: FUNCTION _check_role_within(role text, mine text[], call text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._check_role_within(role text, mine text[], call text) FROM PUBLIC;

--
-- Name: FUNCTION _claim_new_keys(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._claim_new_keys(tenant text, keys text[], requests jsonb[], principal text, scopes text[], binding_generation bigint, lease interval, worker text, max_attempts integer) FROM PUBLIC;

--
-- Name: FUNCTION _claim_refused(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, below bigint, as_of timestamp with time zone, worker text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._claim_refused(tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint, below bigint, as_of timestamp with time zone, worker text) FROM PUBLIC;

--
-- Name: FUNCTION _complete_holders(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._complete_holders(tenant text, keys text[], attempts integer[], lease_tokens uuid[], fingerprints text[], principal text, scopes text[], binding_generation bigint, results jsonb[]) FROM PUBLIC;

--
-- Name: FUNCTION _conflict_on(diff text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._conflict_on(diff text[]) FROM PUBLIC;

--
-- Name: FUNCTION _dead_letter(op settle_private.operations, as_of timestamp with time zone, error jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._dead_letter(op settle_private.operations, as_of timestamp with time zone, error jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _dead_letter_in_doubt_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._dead_letter_in_doubt_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _end_attempt(tenant text, key text, attempt integer, at timestamp with time zone, reason text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._end_attempt(tenant text, key text, attempt integer, at timestamp with time zone, reason text) FROM PUBLIC;

--
-- Name: FUNCTION _exact(d interval); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._exact(d interval) FROM PUBLIC;

--
-- Name: FUNCTION _expire(op settle_private.operations, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._expire(op settle_private.operations, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _expire_key(tenant text, key text, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._expire_key(tenant text, key text, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _expiry(at timestamp with time zone, d interval); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._expiry(at timestamp with time zone, d interval) FROM PUBLIC;

--
-- Name: FUNCTION _feed_check_admin(call text, tenants text[], consumer text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_check_admin(call text, tenants text[], consumer text) FROM PUBLIC;

--
-- Name: FUNCTION _feed_consumer(name text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_consumer(name text) FROM PUBLIC;

--
-- Name: FUNCTION _feed_horizon(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_horizon() FROM PUBLIC;

--
-- Name: FUNCTION _feed_horizon_holders(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_horizon_holders() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._feed_horizon_holders() TO settle_consumer;
GRANT ALL ON FUNCTION settle_private._feed_horizon_holders() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._feed_horizon_holders() TO settle_admin;

--
-- Name: FUNCTION _feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]) FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]) TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._feed_in_lane(lane_hash integer, tenant text, lanes integer, lane integer, tenants text[]) TO settle_admin;

--
-- Name: FUNCTION _feed_lag(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_lag() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._feed_lag() TO settle_consumer;
GRANT ALL ON FUNCTION settle_private._feed_lag() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._feed_lag() TO settle_admin;

--
-- Name: FUNCTION _feed_lane_marker(consumer text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_lane_marker(consumer text) FROM PUBLIC;

--
-- Name: FUNCTION _feed_metrics(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_metrics() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._feed_metrics() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._feed_metrics() TO settle_admin;

--
-- Name: FUNCTION _feed_positions_lock(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_positions_lock() FROM PUBLIC;

--
-- Name: FUNCTION _feed_visible(tenants text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._feed_visible(tenants text[]) FROM PUBLIC;

--
-- Name: FUNCTION _fence_reason(op settle_private.operations, attempt integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._fence_reason(op settle_private.operations, attempt integer) FROM PUBLIC;

--
-- Name: FUNCTION _fingerprint(request jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._fingerprint(request jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _floor(tenant text, principal text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._floor(tenant text, principal text) FROM PUBLIC;

--
-- Name: FUNCTION _heartbeat_revoked(op settle_private.operations, attempt integer, lease_token uuid, below bigint, as_of timestamp with time zone); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._heartbeat_revoked(op settle_private.operations, attempt integer, lease_token uuid, below bigint, as_of timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION _invisible(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._invisible() FROM PUBLIC;

--
-- Name: FUNCTION _is_attempt_token(tenant text, key text, attempt integer, token uuid); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._is_attempt_token(tenant text, key text, attempt integer, token uuid) FROM PUBLIC;

--
-- Name: FUNCTION _is_blank(value text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._is_blank(value text) FROM PUBLIC;

--
-- Name: FUNCTION _json_bytes(value jsonb, max_bytes integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._json_bytes(value jsonb, max_bytes integer) FROM PUBLIC;

--
-- Name: FUNCTION _json_ok(value jsonb, max_bytes integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._json_ok(value jsonb, max_bytes integer) FROM PUBLIC;

--
-- Name: FUNCTION _keyed_instant(tenant text, principal text, binding_generation bigint, floor_at_start bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._keyed_instant(tenant text, principal text, binding_generation bigint, floor_at_start bigint) FROM PUBLIC;

--
-- Name: FUNCTION _lease_ok(lease interval); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._lease_ok(lease interval) FROM PUBLIC;

--
-- Name: FUNCTION _limit(name text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._limit(name text) FROM PUBLIC;

--
-- Name: FUNCTION _limits(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._limits() FROM PUBLIC;

--
-- Name: FUNCTION _lock_diff(op settle_private.operations, fingerprint text, principal text, scopes text[], binding_generation bigint); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._lock_diff(op settle_private.operations, fingerprint text, principal text, scopes text[], binding_generation bigint) FROM PUBLIC;

--
-- Name: FUNCTION _lock_operation(tenant text, key text, purged_ok boolean, lock boolean); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._lock_operation(tenant text, key text, purged_ok boolean, lock boolean) FROM PUBLIC;

--
-- Name: FUNCTION _lookalike_spaces(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._lookalike_spaces() FROM PUBLIC;

--
-- Name: FUNCTION _may_have_taken_effect(tenant text, key text, status settle.status, attempt integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._may_have_taken_effect(tenant text, key text, status settle.status, attempt integer) FROM PUBLIC;

--
-- Name: FUNCTION _metrics(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._metrics() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._metrics() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._metrics() TO settle_admin;

--
-- Name: FUNCTION _name_ascii_ok(value text, max_bytes integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._name_ascii_ok(value text, max_bytes integer) FROM PUBLIC;

--
-- Name: FUNCTION _name_ok(value text, max_bytes integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._name_ok(value text, max_bytes integer) FROM PUBLIC;

--
-- Name: FUNCTION _name_ok_unicode(value text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._name_ok_unicode(value text) FROM PUBLIC;

--
-- Name: FUNCTION _next_seq(tenant text, key text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._next_seq(tenant text, key text) FROM PUBLIC;

--
-- Name: FUNCTION _normalize_scopes(scopes text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._normalize_scopes(scopes text[]) FROM PUBLIC;

--
-- Name: FUNCTION _observation_revoked(kind text, op settle_private.operations, attempt integer, fingerprint text, principal text, scopes text[], binding_generation bigint, payload jsonb, below bigint, as_of timestamp with time zone); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._observation_revoked(kind text, op settle_private.operations, attempt integer, fingerprint text, principal text, scopes text[], binding_generation bigint, payload jsonb, below bigint, as_of timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION _observe(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._observe(kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text, principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean) FROM PUBLIC;

--
-- Name: FUNCTION _presented(fingerprint text, principal text, scopes text[], binding_generation bigint, payload_name text, payload jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._presented(fingerprint text, principal text, scopes text[], binding_generation bigint, payload_name text, payload jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _purge_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._purge_key(tenant text, key text, cutoff timestamp with time zone, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _purge_tombstone(tenant text, key text, cutoff timestamp with time zone); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._purge_tombstone(tenant text, key text, cutoff timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION _raise(code text, message text, detail jsonb, hint text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._raise(code text, message text, detail jsonb, hint text) FROM PUBLIC;

--
-- Name: FUNCTION _raise_reference(rule text, tenant text, key text, attempt integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._raise_reference(rule text, tenant text, key text, attempt integer) FROM PUBLIC;

--
-- Name: FUNCTION _raise_row_rule(rule text, relation text, tenant text, key text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._raise_row_rule(rule text, relation text, tenant text, key text) FROM PUBLIC;

--
-- Name: FUNCTION _rank(status settle.status); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._rank(status settle.status) FROM PUBLIC;

--
-- Name: FUNCTION _record_attempt(tenant text, key text, attempt integer); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._record_attempt(tenant text, key text, attempt integer) FROM PUBLIC;

--
-- Name: FUNCTION _record_observation(tenant text, key text, attempt integer, observation settle.status, at timestamp with time zone, error jsonb, retryable boolean, late_result jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._record_observation(tenant text, key text, attempt integer, observation settle.status, at timestamp with time zone, error jsonb, retryable boolean, late_result jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _refuse_bound(call text, detail jsonb); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._refuse_bound(call text, detail jsonb) FROM PUBLIC;

--
-- Name: FUNCTION _refuse_tenant(tenant text, key text, call text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._refuse_tenant(tenant text, key text, call text) FROM PUBLIC;

--
-- Name: FUNCTION _resolving_failed(tenant text, key text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._resolving_failed(tenant text, key text) FROM PUBLIC;

--
-- Name: FUNCTION _revoke_on_touch(op settle_private.operations, principal text, below bigint, as_of timestamp with time zone); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._revoke_on_touch(op settle_private.operations, principal text, below bigint, as_of timestamp with time zone) FROM PUBLIC;

--
-- Name: FUNCTION _revoke_operation(op settle_private.operations, below bigint, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._revoke_operation(op settle_private.operations, below bigint, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _revoke_touch(tenant text, key text, principal text, below bigint, as_of timestamp with time zone, actor text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._revoke_touch(tenant text, key text, principal text, below bigint, as_of timestamp with time zone, actor text) FROM PUBLIC;

--
-- Name: FUNCTION _scopes_ok(scopes text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._scopes_ok(scopes text[]) FROM PUBLIC;

--
-- Name: FUNCTION _set_based_batches(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._set_based_batches() FROM PUBLIC;

--
-- Name: FUNCTION _sort_scopes(scopes text[]); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._sort_scopes(scopes text[]) FROM PUBLIC;

--
-- Name: FUNCTION _tenant_ok(tenant text); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._tenant_ok(tenant text) FROM PUBLIC;

--
-- Name: FUNCTION _upkeep_metrics(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private._upkeep_metrics() FROM PUBLIC;
GRANT ALL ON FUNCTION settle_private._upkeep_metrics() TO settle_readonly;
GRANT ALL ON FUNCTION settle_private._upkeep_metrics() TO settle_admin;

--
-- Name: FUNCTION tg_any__refuse_delete(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_any__refuse_delete() FROM PUBLIC;

--
-- Name: FUNCTION tg_attempts__guard_identity(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_attempts__guard_identity() FROM PUBLIC;

--
-- Name: FUNCTION tg_attempts__guard_record(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_attempts__guard_record() FROM PUBLIC;

--
-- Name: FUNCTION tg_audit_log__refuse_change(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_audit_log__refuse_change() FROM PUBLIC;

--
-- Name: FUNCTION tg_feed_consumers__drop_lanes(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_feed_consumers__drop_lanes() FROM PUBLIC;

--
-- Name: FUNCTION tg_feed_lanes__guard_consumer(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_feed_lanes__guard_consumer() FROM PUBLIC;

--
-- Name: FUNCTION tg_operations__guard(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_operations__guard() FROM PUBLIC;

--
-- Name: FUNCTION tg_operations__guard_attempt(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_operations__guard_attempt() FROM PUBLIC;

--
-- Name: FUNCTION tg_operations__guard_lock(); Type: ACL; Schema: settle_private; Owner: settle_owner
--

REVOKE ALL ON FUNCTION settle_private.tg_operations__guard_lock() FROM PUBLIC;

--
-- Name: TABLE admin_log; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.admin_log TO settle_readonly;
GRANT SELECT ON TABLE settle.admin_log TO settle_admin;

--
-- Name: TABLE attempts; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.attempts TO settle_readonly;
GRANT SELECT ON TABLE settle.attempts TO settle_admin;
GRANT SELECT ON TABLE settle.attempts TO settle_reconciler;

--
-- Name: TABLE audit_log; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.audit_log TO settle_readonly;
GRANT SELECT ON TABLE settle.audit_log TO settle_admin;
GRANT SELECT ON TABLE settle.audit_log TO settle_reconciler;

--
-- Name: TABLE audit_overflow; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.audit_overflow TO settle_readonly;
GRANT SELECT ON TABLE settle.audit_overflow TO settle_admin;

--
-- Name: TABLE dead_letters; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.dead_letters TO settle_readonly;
GRANT SELECT ON TABLE settle.dead_letters TO settle_admin;
GRANT SELECT ON TABLE settle.dead_letters TO settle_reconciler;

--
-- Name: TABLE feed_consumers; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.feed_consumers TO settle_consumer;
GRANT SELECT ON TABLE settle.feed_consumers TO settle_readonly;
GRANT SELECT ON TABLE settle.feed_consumers TO settle_admin;

--
-- Name: TABLE feed_events; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.feed_events TO settle_readonly;
GRANT SELECT ON TABLE settle.feed_events TO settle_admin;

--
-- Name: TABLE feed_horizon; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.feed_horizon TO settle_consumer;
GRANT SELECT ON TABLE settle.feed_horizon TO settle_readonly;
GRANT SELECT ON TABLE settle.feed_horizon TO settle_admin;

--
-- Name: TABLE metrics; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.metrics TO settle_readonly;
GRANT SELECT ON TABLE settle.metrics TO settle_admin;

--
-- Name: TABLE settlements; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.settlements TO settle_readonly;
GRANT SELECT ON TABLE settle.settlements TO settle_admin;

--
-- Name: TABLE stats; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.stats TO settle_readonly;
GRANT SELECT ON TABLE settle.stats TO settle_admin;

--
-- Name: TABLE upkeep; Type: ACL; Schema: settle; Owner: settle_owner
--

GRANT SELECT ON TABLE settle.upkeep TO settle_readonly;
GRANT SELECT ON TABLE settle.upkeep TO settle_admin;

--
-- PostgreSQL database dump complete
--
