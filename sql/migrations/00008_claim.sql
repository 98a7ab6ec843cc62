-- 00008: settle.claim, the claim phase of locked reservation.
--
-- Why: the first claim of (tenant, key) records the reservation lock (request fingerprint and
-- authorization binding) and opens attempt 1 with a fenced lease judged by the database clock;
-- every later claim joins it: replay of a completed result, in_progress while a live lease is
-- held, failed, conflict for a different request or binding (nothing disclosed, nothing runs),
-- in_doubt when the caller asked not to re-run an operation whose attempt reported unknown
-- (rerun_after_unknown => false), or a new attempt epoch. A lapsed lease is taken over here, without waiting for the sweeper
-- (settle_private._expire, 00006). The call touches the rows of one (tenant, key) only, found
-- through its arguments, so it can later be delegated to the shard that holds that key.

set local role settle_owner;

create type settle.claim_result as (
  outcome text,
  status settle.status,
  attempt integer,
  lease_token uuid,
  lease_expires_at timestamptz,
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
comment on type settle.claim_result is
  'Answer of settle.claim. outcome: acquired | in_progress | replay | failed | unknown | in_doubt | conflict | refused. Columns that do not apply to an outcome are NULL; a conflict discloses only conflict_on, a refusal only its reason (binding_revoked). dead_letter_reason: attempts_exhausted (failed) or needs_reconciliation (unknown).';

-- settle.claim presenting a revoked generation: nothing runs, nothing is disclosed; the refusal
-- is audited with what it presented. Decided on a plain read, without the row lock: anyone who
-- knows a principal's name can present its revoked generation, and must not make the operation's
-- callers wait. The operation it reserved, if any, is converted at the next touch
-- by a caller that may wait (a valid attempt token, or a claim or get above the floor).
create function settle_private._claim_refused(
  tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint,
  below bigint, as_of timestamptz, worker text)
returns settle.claim_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
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

-- claim(tenant, key, request, principal, scopes, binding_generation, lease, worker, max_attempts, rerun_after_unknown)
-- Reserve (tenant, key) on first call, or join it: acquired | in_progress | replay | failed | unknown
-- | in_doubt | conflict | refused.
create function settle.claim(
  tenant text,
  key text,
  request jsonb,
  principal text,
  scopes text[] default '{}',
  binding_generation bigint default 0,
  lease interval default '30 seconds',
  worker text default null,
  max_attempts integer default 5,
  rerun_after_unknown boolean default true)
returns settle.claim_result
language plpgsql
security definer
set search_path = pg_catalog, pg_temp
as $$
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

comment on function settle.claim(text, text, jsonb, text, text[], bigint, interval, text, integer, boolean) is
  'Reserve an operation on first call, or join it: the claim phase of locked reservation.
Parameters: tenant (1-64 bytes), key (1-255 bytes; both NFC, no control characters, not blank), request jsonb (effect-defining fields, <= 64 KiB), principal (1-255 bytes), scopes text[] (<= 64, order and duplicates ignored), binding_generation bigint >= 0 (token epoch / session version), lease interval (1 s - 1 day, default 30 s), worker (optional, <= 128 bytes), max_attempts (1-1000, default 5; fixed at first claim), rerun_after_unknown boolean (default true: an operation whose attempt reported unknown opens a new attempt; false: it answers in_doubt and runs nothing, for a caller without a way to check the downstream).
Outcomes (exactly one row, also when sessions race on a new key): acquired (attempt N+1 opened: attempt, lease_token, lease_expires_at, fingerprint) | in_progress (a live lease is held: attempt, lease_expires_at, retry_after_ms) | replay (completed: result, settled_attempt) | failed (a committed failure: a final failure, or every attempt failed and the budget is spent; error, dead_lettered, dead_letter_reason attempts_exhausted when dead-lettered) | unknown (the attempt budget is spent and an attempt may have taken effect: dead_lettered, dead_letter_reason needs_reconciliation; nothing runs; a matching success of an earlier attempt still settles it) | in_doubt (only with rerun_after_unknown => false: an attempt reported unknown, no lease is live and the operation is not dead-lettered: status unknown, attempt, dead_lettered false; no attempt is opened, no lease taken, no row changed; a lapsed lease of a pending or running operation is still taken over) | conflict (request or binding differ from the reservation: conflict_on lists request/principal/scopes/binding_generation; nothing stored is disclosed, nothing executes) | refused (reason binding_revoked: the presented binding generation is below the floor of settle.revoke_binding; nothing runs or is disclosed; the refusal is audited with what was presented).
SQLSTATEs: SE001 tenant, SE002 key (no control, default-ignorable or bidirectional-control characters), SE003 binding, SE004 request, SE007 lease (an exact duration: no month or year part), SE008 worker/max_attempts/rerun_after_unknown NULL, SE013 tenant not granted to this login role.
Locking: answers that change nothing (conflict, replay, in_progress, failed, unknown, in_doubt) come from a plain read; a new key is inserted; a takeover or a new attempt locks the operation row (FOR UPDATE) and decides again. A lapsed lease is taken over in place.
Idempotency: retrying with the same request and binding joins the same operation. Every call leaves one row in settle.audit_log except the read-only answers replay and in_progress, which write nothing (no WAL, no commit flush); an acquiring claim is logged on the attempt it opens.';

reset role;
