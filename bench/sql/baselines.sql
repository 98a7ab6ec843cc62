-- Tables for the plain-SQL baselines and the in-database effect of the `local` scenario.
-- Applied by the bench runner to its template database after the engine migrations.
-- Not part of the engine: nothing here is API.

create schema bench;

-- floor2: the physical floor of any claim-then-settle protocol. One row per operation,
-- written twice (the claim, then the settlement), each in its own durable transaction.
create table bench.floor2 (
  key text primary key,
  claimed_at timestamptz not null,
  settled_at timestamptz,
  result jsonb
);

-- lww: what code without pg-settle does, one last-write-wins upsert per operation.
create table bench.lww (
  key text primary key,
  result jsonb not null,
  updated_at timestamptz not null
);

-- stripe: the widely copied Stripe-style idempotency-key table (brandur.org/idempotency-keys),
-- same columns and unique key (user_id, idempotency_key).
create table bench.stripe_keys (
  id bigserial primary key,
  created_at timestamptz not null default now(),
  idempotency_key text not null,
  last_run_at timestamptz not null default now(),
  locked_at timestamptz default now(),
  request_method text not null,
  request_params jsonb not null,
  request_path text not null,
  response_code integer,
  response_body jsonb,
  recovery_point text not null,
  user_id bigint not null,
  constraint stripe_keys_user_key unique (user_id, idempotency_key)
);

-- local: the in-database effect committed in the same transaction as its settlement.
create table bench.ledger (
  entry_id bigint generated always as identity primary key,
  tenant text not null,
  key text not null,
  amount bigint not null,
  created_at timestamptz not null default now()
);

-- spec4: the rows the specification requires, written by plain SQL (bench/scripts/spec4.sql):
-- no PL/pgSQL, no triggers, no row rules, no RLS, no validation. Copies of the shapes of
-- settle_private.operations, attempts and audit_log (00002): same columns and types (the
-- status enum copied in lattice order), primary keys, the attempts -> operations foreign key,
-- the three partial indexes of operations and the fillfactors. Left out on purpose: the guard
-- and row-rule triggers, RLS and the audit_log CHECK `event_is_known` (validation). What the
-- engine spends over this baseline is its own overhead, not the specification's.
create type bench.spec4_status as enum ('pending', 'running', 'unknown', 'conflict', 'failed', 'completed');

create table bench.spec4_operations (
  tenant text not null,
  key text not null,
  fingerprint text not null,
  request jsonb not null,
  principal text not null,
  scopes text[] not null,
  binding_generation bigint not null,
  status bench.spec4_status not null,
  attempt integer not null,
  max_attempts integer not null,
  lease_token uuid,
  lease_expires_at timestamptz,
  result jsonb,
  settled_attempt integer,
  settled_at timestamptz,
  error jsonb,
  dead_lettered_at timestamptz,
  redrive_count integer not null default 0,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  constraint spec4_operations_pkey primary key (tenant, key)
) with (fillfactor = 80);

create index spec4_operations_by_lease_expiry_idx
  on bench.spec4_operations (lease_expires_at)
  where lease_token is not null;

create index spec4_operations_exhausted_idx
  on bench.spec4_operations (updated_at)
  where lease_token is null and status in ('pending', 'unknown', 'conflict') and attempt >= max_attempts;

create index spec4_operations_terminal_by_age_idx
  on bench.spec4_operations (updated_at)
  where status in ('failed', 'completed');

create table bench.spec4_attempts (
  tenant text not null,
  key text not null,
  attempt integer not null,
  lease_token uuid not null,
  worker text,
  claimed_at timestamptz not null,
  ended_at timestamptz,
  end_reason text,
  observation bench.spec4_status,
  observed_at timestamptz,
  retryable boolean,
  error jsonb,
  late_result jsonb,
  settled boolean not null default false,
  constraint spec4_attempts_pkey primary key (tenant, key, attempt),
  constraint spec4_attempts_belong_to_operation foreign key (tenant, key)
    references bench.spec4_operations (tenant, key)
) with (fillfactor = 80);

create table bench.spec4_audit_log (
  tenant text not null,
  key text not null,
  audit_id bigint generated always as identity,
  at timestamptz not null,
  event text not null,
  outcome text not null,
  attempt integer,
  status_before bench.spec4_status,
  status_after bench.spec4_status,
  actor text,
  detail jsonb,
  constraint spec4_audit_log_pkey primary key (tenant, key, audit_id)
);
