import type { Features } from './ladder-steps.js';

/**
 * The guard triggers of a ladder step: the prototype's one plain guard, or the engine's guards
 * (00004) copied with their row rules; with `guardWhen` each guard behind a WHEN clause that is
 * true only when a rule would be broken or the row is in an earlier state.
 *
 * Simplified where the cycle never goes: the errors carry a shorter detail, the failure guard
 * does not look for settle.resolve's audit row, and the refuse-delete and refuse-truncate
 * triggers are left out (no cycle deletes).
 */

interface Rule {
  readonly name: string;
  /** Holds when true or NULL, as a CHECK constraint. */
  readonly holds: string;
}

/** 00004: the rules on a new operation's lock columns, budget and lease (INSERT). */
const OPERATION_INSERT_RULES: readonly Rule[] = [
  { name: 'tenant_length_in_range', holds: "octet_length(new.tenant) between 1 and p._limit('tenant_bytes')" },
  { name: 'key_length_in_range', holds: "octet_length(new.key) between 1 and p._limit('key_bytes')" },
  { name: 'principal_length_in_range', holds: "octet_length(new.principal) between 1 and p._limit('principal_bytes')" },
  {
    name: 'fingerprint_is_versioned',
    holds: "new.fingerprint ~ '^v1:[0-9a-f]+$' and octet_length(new.fingerprint) = 67",
  },
  { name: 'binding_generation_not_negative', holds: 'new.binding_gen >= 0' },
  { name: 'attempt_within_budget', holds: 'new.attempt >= 0 and new.attempt <= new.max_attempts' },
  { name: 'max_attempts_positive', holds: 'new.max_attempts >= 1' },
  { name: 'lease_token_iff_lease_expiry', holds: '(new.lease_token is null) = (new.lease_expires_at is null)' },
  { name: 'pending_is_unleased', holds: "new.status <> 'pending' or new.lease_token is null" },
  { name: 'running_is_leased', holds: "new.status <> 'running' or new.lease_token is not null" },
];

/** 00004: the row rules of operations after an UPDATE. */
const OPERATION_RULES: readonly Rule[] = [
  { name: 'attempt_within_budget', holds: 'new.attempt >= 0 and new.attempt <= new.max_attempts' },
  { name: 'max_attempts_positive', holds: 'new.max_attempts >= 1' },
  { name: 'lease_token_iff_lease_expiry', holds: '(new.lease_token is null) = (new.lease_expires_at is null)' },
  { name: 'pending_is_unleased', holds: "new.status <> 'pending' or new.lease_token is null" },
  { name: 'running_is_leased', holds: "new.status <> 'running' or new.lease_token is not null" },
  { name: 'terminal_is_unleased', holds: "new.status not in ('failed', 'completed') or new.lease_token is null" },
  { name: 'completed_has_result', holds: "(new.status = 'completed') = (new.result is not null)" },
  {
    name: 'completed_has_settlement',
    holds: "(new.status = 'completed') = (new.settled_attempt is not null and new.settled_at is not null)",
  },
  {
    name: 'settled_attempt_was_opened',
    holds: 'new.settled_attempt is null or new.settled_attempt between 1 and new.attempt',
  },
  { name: 'failed_has_error', holds: "new.status <> 'failed' or new.error is not null" },
  { name: 'dead_letter_has_reason', holds: '(new.dead_lettered_at is null) = (new.dead_letter_reason is null)' },
  { name: 'dead_letter_is_unleased', holds: 'new.dead_lettered_at is null or new.lease_token is null' },
  {
    name: 'dead_letter_reason_fits_status',
    holds:
      "new.dead_letter_reason is null or (new.dead_letter_reason = 'attempts_exhausted' and new.status = 'failed') or (new.dead_letter_reason = 'needs_reconciliation' and new.status in ('unknown', 'conflict'))",
  },
  { name: 'redrive_count_not_negative', holds: 'new.redrive_count >= 0' },
];

/** 00004: the rules of a new attempt's identity (INSERT), then of every attempt row. */
const ATTEMPT_INSERT_RULES: readonly Rule[] = [
  { name: 'attempt_is_positive', holds: 'new.attempt >= 1' },
  {
    name: 'claim_log_complete',
    holds:
      '(new.claim_seq is null) = (new.claim_audit_id is null) and (new.claim_seq is null) = (new.claim_status_after is null)',
  },
];
const ATTEMPT_RULES: readonly Rule[] = [
  {
    name: 'observation_is_an_outcome',
    holds: "new.observation is null or new.observation in ('unknown', 'conflict', 'failed', 'completed')",
  },
  { name: 'observed_iff_observation', holds: '(new.observation is null) = (new.observed_at is null)' },
  { name: 'end_reason_iff_ended', holds: '(new.ended_at is null) = (new.end_reason is null)' },
  {
    name: 'end_reason_is_known',
    holds:
      "new.end_reason is null or new.end_reason in ('observed', 'lease_expired', 'settled_elsewhere', 'exhausted', 'binding_revoked')",
  },
  {
    name: 'failure_has_error',
    holds: "new.observation is distinct from 'failed' or (new.error is not null and new.retryable is not null)",
  },
  { name: 'settled_requires_completion', holds: "not new.settled or new.observation = 'completed'" },
  {
    name: 'settled_as_is_the_attempt',
    holds: 'new.settled_as is not distinct from case when new.settled then new.attempt end',
  },
  {
    name: 'settlement_is_logged',
    holds:
      'new.settled = (new.settled_seq is not null) and (new.settled_seq is null) = (new.settled_audit_id is null) and (new.settled_seq is null) = (new.settled_reason is null)',
  },
  {
    name: 'late_result_only_when_not_settled',
    holds: "new.late_result is null or (new.observation = 'completed' and not new.settled)",
  },
];

/** The first broken rule's name (a CASE, as the engine's guards), NULL when every rule holds. */
const caseOf = (rules: readonly Rule[]): string =>
  `case\n${rules.map((r) => `      when not (${r.holds}) then '${r.name}'`).join('\n')}\n    end`;

/** True when some rule is broken: the same rules as a WHEN condition. */
const brokenAny = (rules: readonly Rule[]): string => rules.map((r) => `not (${r.holds})`).join('\n     or ');

/** The earlier-state test of the lattice guard, which the settling UPDATE fails. */
const EARLIER_STATE =
  "old.status = 'completed' or (new.status < old.status) is not false or new.attempt < old.attempt or new.redrive_count < old.redrive_count";

/** The prototype's guard, unchanged (with the request and scopes in the lock once they are stored). */
function prototypeGuard(f: Features): string {
  const lock = f.request
    ? 'new.fingerprint <> old.fingerprint or new.request <> old.request or new.principal <> old.principal or new.scopes <> old.scopes or new.binding_gen <> old.binding_gen'
    : 'new.fingerprint <> old.fingerprint or new.principal <> old.principal or new.binding_gen <> old.binding_gen';
  return `create function p.no_downgrade() returns trigger language plpgsql as $$
begin
  if p.rank(new.status) < p.rank(old.status) then raise exception 'downgrade % -> %', old.status, new.status using errcode='P0001'; end if;
  if old.status = 'completed' and (new.result is distinct from old.result) then raise exception 'result immutable'; end if;
  if ${lock} then raise exception 'lock immutable'; end if;
  return new;
end $$;
create trigger ops_no_downgrade before update on p.operations for each row execute function p.no_downgrade();
`;
}

/** The feed event of a move into a final status (00004, in the lattice guard). */
export const feedEventFromTrigger = `    if old.status = 'failed' or new.redrive_count > 0 then
      select e.position_xid into v_previous from p.feed_events e
       where e.tenant = new.tenant and e.key = new.key and e.status = 'failed'
       order by e.event_id desc limit 1;
    end if;
    insert into p.feed_events
      (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt, result, error,
       dead_letter_reason, redrive_count, occurred_at)
    values (new.tenant, new.key, greatest(pg_current_xact_id(), v_previous), pg_current_xact_id(), hashtext(new.key),
            new.status, old.status, coalesce(new.settled_attempt, new.attempt), new.result, new.error,
            new.dead_letter_reason, new.redrive_count, new.updated_at)
    returning exists (select 1 from p.feed_waiters w where w.until > now()) into v_wake;
    if v_wake then
      perform pg_notify('p_feed', '');
    end if;`;

const RAISE_HELPERS = `create function p._raise_row_rule(rule text, relation text, tenant text, key text) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  raise exception using errcode = 'check_violation', constraint = rule, schema = 'p', table = relation,
    message = format('new row for relation "%s" violates check constraint "%s"', relation, rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key)::text;
end $$;
`;

/** 00004: operations' guard, INSERT branch (7a) and UPDATE branch (7b). */
function operationsGuard(f: Features): string {
  const insertBranch = `  if tg_op = 'INSERT' then
    if new.status not in ('pending', 'running') or new.result is not null or new.settled_attempt is not null
       or new.error is not null or new.dead_lettered_at is not null or new.dead_letter_reason is not null
       or new.redrive_count <> 0 then
      raise exception using errcode = 'SE021', message = 'a new operation must start unsettled (pending or running, no result, no error)';
    end if;
    v_rule := ${caseOf(OPERATION_INSERT_RULES)};
    if v_rule is not null then
      perform p._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
    end if;
    return new;
  end if;`;
  if (!f.guardLattice) {
    return `${RAISE_HELPERS}create function p.tg_operations__guard() returns trigger language plpgsql as $$
declare
  v_rule text;
begin
${insertBranch}
  return new;
end $$;
`;
  }
  const feed = f.feed && !f.guardWhen;
  return `${RAISE_HELPERS}create function p._may_have_taken_effect(tenant text, key text, status p.status) returns boolean
language plpgsql stable as $$
begin
  return _may_have_taken_effect.status in ('unknown', 'conflict')
      or exists (select 1 from p.attempts a
                  where a.tenant = _may_have_taken_effect.tenant and a.key = _may_have_taken_effect.key
                    and a.observation is distinct from 'failed');
end $$;
create function p.tg_operations__guard() returns trigger language plpgsql as $$
declare
  v_redrive boolean;
  v_rule text;
  v_previous xid8;
  v_wake boolean;
begin
${insertBranch}
  if ${EARLIER_STATE} then
    if old.status = 'completed' then
      if new.result is distinct from old.result or new.settled_attempt is distinct from old.settled_attempt
         or new.settled_at is distinct from old.settled_at then
        raise exception using errcode = 'SE022', message = 'the result of a completed operation is immutable';
      end if;
    end if;
    if (new.status < old.status) is not false then
      v_redrive := old.status = 'failed' and old.dead_letter_reason = 'attempts_exhausted'
        and new.status = 'pending' and new.dead_lettered_at is null
        and new.redrive_count = old.redrive_count + 1;
      if v_redrive and p._may_have_taken_effect(old.tenant, old.key, old.status) then
        v_redrive := false;
      end if;
      if p.rank(new.status) < p.rank(old.status) and not v_redrive then
        raise exception using errcode = 'SE021',
          message = format('status may not move down the lattice from %s to %s', old.status, new.status);
      end if;
    end if;
    if new.attempt < old.attempt or new.redrive_count < old.redrive_count then
      raise exception using errcode = 'SE021', message = 'attempt epochs and redrive generations never go back';
    end if;
  end if;
  v_rule := ${caseOf(OPERATION_RULES)};
  if v_rule is not null then
    perform p._raise_row_rule(v_rule, 'operations', new.tenant, new.key);
  end if;
  if new.status = 'failed' and old.status <> 'failed' then
    if p._may_have_taken_effect(new.tenant, new.key, old.status) then
      raise exception using errcode = 'SE021', message = 'status may move to failed only on a committed failure';
    end if;
  end if;
${
  feed
    ? `  if new.status in ('completed', 'failed') and new.status is distinct from old.status then
${feedEventFromTrigger}
  end if;
`
    : ''
}  return new;
end $$;
create function p.tg_operations__guard_lock() returns trigger language plpgsql as $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.fingerprint is distinct from old.fingerprint or new.request is distinct from old.request
     or new.principal is distinct from old.principal or new.scopes is distinct from old.scopes
     or new.binding_gen is distinct from old.binding_gen or new.created_at is distinct from old.created_at then
    raise exception using errcode = 'SE020', message = 'the reservation lock of an operation is immutable';
  end if;
  return new;
end $$;
`;
}

/** 00004: the attempts guard (_100_guard_settlement) and the identity guard. */
function attemptsGuard(): string {
  return `create function p._raise_reference(rule text, tenant text, key text, attempt integer) returns void
language plpgsql set search_path = pg_catalog, pg_temp as $$
begin
  raise exception using errcode = 'foreign_key_violation', constraint = rule, schema = 'p', table = 'attempts',
    message = format('insert or update on table "attempts" violates foreign key constraint "%s"', rule),
    detail = jsonb_build_object('tenant', tenant, 'key', key, 'attempt', attempt)::text;
end $$;
create function p.tg_attempts__guard_settlement() returns trigger language plpgsql as $$
declare
  v_rule text;
  v_named integer;
begin
  if tg_op = 'INSERT' then
    if new.claimed_by is distinct from session_user::text then
      new.claimed_by := session_user::text;
    end if;
    v_rule := ${caseOf(ATTEMPT_INSERT_RULES)};
    if v_rule is not null then
      perform p._raise_row_rule(v_rule, 'attempts', new.tenant, new.key);
    end if;
  else
    if new.settled_seq is not null and old.settled_seq is null and new.settled_by is distinct from session_user::text then
      new.settled_by := session_user::text;
    end if;
    if old.settled_seq is not null or old.ended_at is not null or old.observation is not null then
      if old.settled_seq is not null and (new.settled_by is distinct from old.settled_by
         or new.settled_seq is distinct from old.settled_seq or new.settled_audit_id is distinct from old.settled_audit_id
         or new.settled_status_before is distinct from old.settled_status_before
         or new.settled_reason is distinct from old.settled_reason) then
        raise exception using errcode = 'SE024', message = 'the identity, end and log of an attempt are immutable';
      end if;
      if old.ended_at is not null and (new.ended_at is distinct from old.ended_at or new.end_reason is distinct from old.end_reason) then
        raise exception using errcode = 'SE024', message = 'the identity, end and log of an attempt are immutable';
      end if;
      if old.observation in ('conflict', 'failed', 'completed') and (new.observation is distinct from old.observation
         or new.error is distinct from old.error or new.retryable is distinct from old.retryable
         or new.late_result is distinct from old.late_result or new.observed_at is distinct from old.observed_at) then
        raise exception using errcode = 'SE024', message = 'an attempt holds at most one terminal observation';
      end if;
      if p.rank(new.observation) < p.rank(old.observation) or (old.settled and not new.settled) then
        raise exception using errcode = 'SE021', message = 'an attempt observation may not move down';
      end if;
    end if;
  end if;
  v_rule := ${caseOf(ATTEMPT_RULES)};
  if v_rule is not null then
    perform p._raise_row_rule(v_rule, 'attempts', new.tenant, new.key);
  end if;
  if tg_op = 'INSERT' then
    select o.settled_attempt into v_named from p.operations o where o.tenant = new.tenant and o.key = new.key;
    if not found then
      perform p._raise_reference('attempts_belong_to_operation', new.tenant, new.key, new.attempt);
    end if;
    if new.settled and v_named is distinct from new.attempt then
      perform p._raise_reference('attempts_settlement_is_the_operations', new.tenant, new.key, new.attempt);
    end if;
  elsif new.settled and not old.settled then
    if not exists (select 1 from p.operations o
                    where o.tenant = new.tenant and o.key = new.key and o.settled_attempt = new.attempt) then
      perform p._raise_reference('attempts_settlement_is_the_operations', new.tenant, new.key, new.attempt);
    end if;
  end if;
  return new;
end $$;
create function p.tg_attempts__guard_identity() returns trigger language plpgsql as $$
begin
  if new.tenant is distinct from old.tenant or new.key is distinct from old.key
     or new.claimed_by is distinct from old.claimed_by or new.attempt is distinct from old.attempt
     or new.lease_token is distinct from old.lease_token or new.worker is distinct from old.worker
     or new.claimed_at is distinct from old.claimed_at or new.claim_seq is distinct from old.claim_seq
     or new.claim_audit_id is distinct from old.claim_audit_id
     or new.claim_status_before is distinct from old.claim_status_before
     or new.claim_status_after is distinct from old.claim_status_after then
    raise exception using errcode = 'SE024', message = 'the identity, end and log of an attempt are immutable';
  end if;
  return new;
end $$;
`;
}

const when = (f: Features, condition: string): string => (f.guardWhen ? `\n  when (${condition})` : '');

/** The guard functions and their triggers. */
export function guards(f: Features): string {
  if (!f.guardInsert) return prototypeGuard(f);
  const parts: string[] = [operationsGuard(f)];
  parts.push(
    `create trigger _100_guard_insert before insert on p.operations for each row${when(
      f,
      `new.status not in ('pending', 'running') or new.result is not null or new.settled_attempt is not null
     or new.error is not null or new.dead_lettered_at is not null or new.dead_letter_reason is not null
     or new.redrive_count <> 0
     or ${brokenAny(OPERATION_INSERT_RULES)}`,
    )}
  execute function p.tg_operations__guard();
`,
  );
  if (f.guardLattice) {
    parts.push(
      `create trigger _050_guard_lock before update of tenant, key, fingerprint, request, principal, scopes, binding_gen, created_at
  on p.operations for each row execute function p.tg_operations__guard_lock();
create trigger _100_guard_lattice before update on p.operations for each row${when(
        f,
        `${EARLIER_STATE}
     or (new.status = 'failed' and old.status <> 'failed')
     or ${brokenAny(OPERATION_RULES)}`,
      )}
  execute function p.tg_operations__guard();
`,
    );
  } else {
    parts.push(prototypeGuard(f));
  }
  if (f.guardAttempts) {
    parts.push(attemptsGuard());
    parts.push(`create trigger _050_guard_identity before update of tenant, key, claimed_by, attempt, lease_token, worker,
  claimed_at, claim_seq, claim_audit_id, claim_status_before, claim_status_after on p.attempts
  for each row execute function p.tg_attempts__guard_identity();
`);
    if (f.guardWhen) {
      // A WHEN clause cannot name OLD in an INSERT trigger: one trigger per event.
      parts.push(`create trigger _100_guard_settlement_insert before insert on p.attempts for each row
  when (new.claimed_by is distinct from session_user::text
     or ${brokenAny([...ATTEMPT_INSERT_RULES, ...ATTEMPT_RULES])})
  execute function p.tg_attempts__guard_settlement();
create trigger _100_guard_settlement_update before update on p.attempts for each row
  when ((new.settled_seq is not null and old.settled_seq is null and new.settled_by is distinct from session_user::text)
     or old.settled_seq is not null or old.ended_at is not null or old.observation is not null
     or ${brokenAny(ATTEMPT_RULES)})
  execute function p.tg_attempts__guard_settlement();
`);
    } else {
      parts.push(`create trigger _100_guard_settlement before insert or update on p.attempts
  for each row execute function p.tg_attempts__guard_settlement();
`);
    }
  }
  return parts.join('');
}
