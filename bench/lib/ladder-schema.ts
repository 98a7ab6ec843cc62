import type { Features } from './ladder-steps.js';

/**
 * The tables, indexes and helper functions of a ladder step (schema `p`), copied from the
 * engine's migrations where a feature adds one of its properties. With no feature on, the
 * output is the prototype's (bench/sql/prototype.sql) statement for statement
 * (test/bench/ladder-render.test.ts compares them without whitespace).
 */

const list = (items: readonly (string | false)[], sep = ',\n  '): string =>
  items.filter((x): x is string => x !== false).join(sep);

/** The prototype's schema, status type and rank. */
export function header(): string {
  return `drop schema if exists p cascade;
create schema p;
create type p.status as enum ('pending','running','unknown','conflict','failed','completed');
create function p.rank(s p.status) returns int language sql immutable as $$
  select case s when 'pending' then 1 when 'running' then 1 when 'unknown' then 2 when 'conflict' then 3 when 'failed' then 4 when 'completed' then 5 end $$;
`;
}

/** Helper functions a feature needs (00003 limits and input predicates, 00005 canonical JSON), before their users. */
export function helpers(f: Features): string {
  const parts: string[] = [];
  if (f.request) {
    parts.push(`-- 00003: scopes are a set, stored and compared sorted without duplicates
create function p._sort_scopes(scopes text[]) returns text[] language plpgsql immutable strict parallel safe
set search_path = pg_catalog, pg_temp as $$
begin
  return array(select distinct s collate "C" from unnest(scopes) as s order by 1);
end $$;
create function p._normalize_scopes(scopes text[]) returns text[] language sql immutable parallel safe as $$
  select case when cardinality(scopes) < 2 then scopes else p._sort_scopes(scopes) end $$;
`);
  }
  if (f.fpCanonical) {
    parts.push(`-- 00005: the canonical JSON form and the versioned fingerprint
create function p._canonical_json_slow(value jsonb) returns text language plpgsql immutable strict parallel safe
set search_path = pg_catalog, pg_temp as $$
begin
  case jsonb_typeof(value)
    when 'object' then
      return '{' || coalesce((select string_agg(to_jsonb(e.k)::text || ': ' || p._canonical_json_slow(e.v), ', ' order by e.n)
                                from jsonb_each(value) with ordinality as e(k, v, n)), '') || '}';
    when 'array' then
      return '[' || coalesce((select string_agg(p._canonical_json_slow(e.v), ', ' order by e.n)
                                from jsonb_array_elements(value) with ordinality as e(v, n)), '') || ']';
    when 'number' then
      return trim_scale(value::numeric)::text;
    else
      return value::text;
  end case;
end $$;
create function p._canonical_json(value jsonb) returns text language plpgsql immutable strict parallel safe as $$
declare
  v_text text := value::text;
begin
  if position('.' in v_text) = 0 then
    return v_text;
  end if;
  return p._canonical_json_slow(value);
end $$;
create function p._fingerprint(request jsonb) returns text language sql stable strict parallel safe as $$
  select 'v1:' || encode(sha256(convert_to(p._canonical_json(request), 'UTF8')), 'hex') $$;
`);
  }
  if (f.guardInsert || f.inputRules) {
    parts.push(`-- 00003: the limits, folded to constants where they are named with a literal
create function p._limits() returns jsonb language sql immutable parallel safe as $$
  select '{"tenant_bytes": 64, "key_bytes": 255, "principal_bytes": 255, "scope_bytes": 128, "max_scopes": 64,
           "worker_bytes": 128, "request_bytes": 65536, "result_bytes": 1048576, "min_lease_ms": 1000,
           "max_lease_ms": 86400000, "max_attempts": 1000}'::jsonb $$;
create function p._limit(name text) returns integer language sql immutable parallel safe as $$
  select (p._limits() ->> name)::integer $$;
`);
  }
  if (f.inputRules) {
    parts.push(`-- 00003: the fast-path predicates (inlinable SQL, built-in functions only)
create function p._name_ascii_ok(value text, max_bytes integer) returns boolean language sql immutable parallel safe as $$
  select octet_length(value) <= max_bytes and value ~ '^[!-~]([ -~]*[!-~])?$' $$;
create function p._json_ok(value jsonb, max_bytes integer) returns boolean language sql stable parallel safe as $$
  select case when pg_column_size(value) > 8 * max_bytes then false else octet_length(value::text) <= max_bytes end $$;
create function p._binding_ascii_ok(principal text, scopes text[], binding_generation bigint) returns boolean
language sql immutable parallel safe as $$
  select p._name_ascii_ok(principal, p._limit('principal_bytes'))
     and binding_generation >= 0
     and (scopes = '{}'::text[]
          or (scopes = array[scopes[1]] and p._name_ascii_ok(scopes[1], p._limit('scope_bytes')))) $$;
create function p._exact(d interval) returns boolean language sql immutable parallel safe as $$
  select date_part('month', d) = 0 and date_part('year', d) = 0 $$;
create function p._lease_ok(lease interval) returns boolean language sql immutable parallel safe as $$
  select p._exact(lease)
     and lease between p._limit('min_lease_ms') * interval '1 millisecond'
                   and p._limit('max_lease_ms') * interval '1 millisecond' $$;
`);
  }
  return parts.join('');
}

/** The operation row: the prototype's, or with the engine's columns in the engine's order. */
export function operationsTable(f: Features): string {
  const fingerprint = `fingerprint ${f.fpText ? 'text' : 'bytea'} not null`;
  const lock = list(
    [
      'tenant text not null',
      'key text not null',
      fingerprint,
      f.request && 'request jsonb not null',
      'principal text not null',
      f.request && 'scopes text[] not null',
      'binding_gen bigint not null',
    ],
    ', ',
  );
  const state = [
    "status p.status not null default 'pending'",
    'attempt int not null default 0',
    'lease_token uuid',
    'lease_expires_at timestamptz',
    'result jsonb',
    'settled_attempt int',
  ];
  const columns = f.wideRow
    ? // 00002: columns a settlement never changes first, then those it changes.
      [
        lock,
        'max_attempts int not null',
        'created_at timestamptz not null default now()',
        'redrive_count int not null default 0',
        'attempt int not null default 0',
        "status p.status not null default 'pending'",
        'lease_token uuid',
        'lease_expires_at timestamptz',
        'result jsonb',
        'settled_attempt int',
        'settled_at timestamptz',
        'error jsonb',
        'dead_lettered_at timestamptz',
        'dead_letter_reason text',
        'updated_at timestamptz not null default now()',
      ]
    : [
        ...(f.tenantKey ? [] : ['id bigint generated always as identity primary key']),
        lock,
        ...state,
        'created_at timestamptz not null default now(), updated_at timestamptz not null default now()',
      ];
  const key = f.tenantKey ? 'primary key (tenant, key)' : 'unique(tenant, key)';
  return `create table p.operations(
  ${list([...columns, key])})${fillfactor(f)};
`;
}

const fillfactor = (f: Features): string => (f.fillfactor ? ' with (fillfactor = 80)' : '');

/** The attempt row: the prototype's, keyed by (tenant, key), then the engine's log columns. */
export function attemptsTable(f: Features): string {
  const key = f.tenantKey ? ['tenant text not null', 'key text not null'] : ['op_id bigint not null'];
  const columns = f.attemptLog
    ? [
        ...key,
        'attempt int not null',
        'lease_token uuid not null',
        'worker text',
        'claimed_at timestamptz not null',
        'claimed_by text',
        'claim_seq bigint',
        'claim_audit_id bigint',
        'claim_status_before p.status',
        'claim_status_after p.status',
        'ended_at timestamptz',
        'end_reason text',
        'observation p.status',
        'observed_at timestamptz',
        'retryable boolean',
        'error jsonb',
        'late_result jsonb',
        'settled boolean not null default false',
        'settled_as int',
        'settled_seq bigint',
        'settled_audit_id bigint',
        'settled_status_before p.status',
        'settled_reason text',
        'settled_by text',
      ]
    : [
        ...key,
        'attempt int not null, worker text, started_at timestamptz not null default now()',
        'outcome text, observed_at timestamptz',
      ];
  const pkey = f.tenantKey ? 'primary key (tenant, key, attempt)' : 'primary key(op_id, attempt)';
  return `create table p.attempts(${list([...columns, pkey], ', ')})${fillfactor(f)};
`;
}

/**
 * The log of other calls: the prototype's events (a row at claim and at completion until the
 * feed replaces them, and for conflicts and duplicates), or from the history position on the
 * engine's audit_log, whose key and identity number every event of an operation (00002).
 */
export function eventsTable(f: Features): string {
  if (f.history) {
    return `create table p.audit_log (
  tenant text not null, key text not null, seq bigint not null, audit_id bigint generated always as identity,
  at timestamptz not null, event text not null, outcome text not null, attempt int,
  status_before p.status, status_after p.status, actor text, detail jsonb, login text,
  constraint audit_log_pkey primary key (tenant, key, seq, audit_id));
create index audit_log_refusals_by_at_idx on p.audit_log (at, outcome, event) where outcome in ('conflict', 'fenced');
create index audit_log_tombstones_by_at_idx on p.audit_log (at) where event = 'purge';
`;
  }
  if (f.tenantKey) {
    return `create table p.events(tenant text not null, key text not null, id bigint generated always as identity, attempt int, kind text not null, at timestamptz not null default now(), detail jsonb, primary key (tenant, key, id));
`;
  }
  return `create table p.events(id bigint generated always as identity primary key, op_id bigint not null, attempt int, kind text not null, at timestamptz not null default now(), detail jsonb);
`;
}

/** 00013: the feed's events with their two indexes beyond the feed order, and the waiters. */
export function feedTables(f: Features): string {
  if (!f.feed) return '';
  return `create table p.feed_events (
  tenant text not null, key text not null, event_id bigint generated always as identity,
  position_xid xid8 not null, xid xid8 not null, lane_hash integer not null,
  status p.status not null, status_before p.status not null, attempt integer not null,
  result jsonb, error jsonb, dead_letter_reason text, redrive_count integer not null, occurred_at timestamptz not null,
  constraint feed_events_pkey primary key (position_xid, event_id));
create index feed_events_failed_by_key_idx on p.feed_events (tenant, key, event_id) where status = 'failed';
create index feed_events_by_slot_idx on p.feed_events (((lane_hash & 2147483647) % 64), position_xid, event_id);
create unlogged table p.feed_waiters (pid integer not null, consumer text not null, until timestamptz not null,
  constraint feed_waiters_pkey primary key (pid));
`;
}

/** 00002/00007: the tenant bindings of login roles and the revocation floors (empty in the bench, as in the engine's). */
export function accessTables(f: Features): string {
  if (!f.access) return '';
  return `create table p.tenant_bindings (
  role_oid oid not null, role_name text not null, tenants text[] not null, bound_at timestamptz not null,
  updated_at timestamptz not null, constraint tenant_bindings_pkey primary key (role_oid));
create index tenant_bindings_by_role_name_idx on p.tenant_bindings (role_name);
create table p.binding_floors (
  tenant text not null, principal text not null, below_generation bigint not null, revoked_at timestamptz not null,
  constraint binding_floors_pkey primary key (tenant, principal),
  constraint below_generation_positive check (below_generation >= 1));
`;
}

/** 00002: the three partial indexes of operations, each its own step. */
export function partialIndexes(f: Features): string {
  return list(
    [
      f.idxLease &&
        'create index operations_by_lease_expiry_idx on p.operations (lease_expires_at) where lease_token is not null;',
      f.idxTerminal &&
        "create index operations_terminal_by_age_idx on p.operations (updated_at) where status in ('failed', 'completed');",
      f.idxAttention &&
        "create index operations_needing_attention_idx on p.operations (status, updated_at)\n  where status in ('pending', 'unknown', 'conflict') or dead_lettered_at is not null;",
    ],
    '\n',
  ).concat(f.idxLease || f.idxTerminal || f.idxAttention ? '\n' : '');
}

/**
 * 00001/00002: the objects owned by a role that is not a superuser (as settle_owner), every
 * table with forced row-level security and an owner_only policy; claim and complete, SECURITY
 * DEFINER, then run as that role and are held to the policies.
 */
export function rowLevelSecurity(f: Features): string {
  if (!f.rls) return '';
  return `do $$
begin
  if not exists (select 1 from pg_roles where rolname = 'ladder_owner') then
    create role ladder_owner nologin;
  end if;
exception when duplicate_object or unique_violation then
  null;
end $$;
alter schema p owner to ladder_owner;
do $$
declare
  t record;
begin
  for t in select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
            where n.nspname = 'p' and c.relkind = 'r' loop
    execute format('alter table p.%I owner to ladder_owner', t.relname);
    execute format('alter table p.%I enable row level security', t.relname);
    execute format('alter table p.%I force row level security', t.relname);
    execute format('create policy owner_only on p.%I to ladder_owner using (true) with check (true)', t.relname);
  end loop;
end $$;
alter function p.claim owner to ladder_owner;
alter function p.complete owner to ladder_owner;
`;
}
