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
