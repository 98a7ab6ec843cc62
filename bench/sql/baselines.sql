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
-- no PL/pgSQL, no triggers, no row rules, no RLS, no validation. The tables take the shapes of
-- settle_private.operations, attempts and audit_log (00002) with LIKE, so they follow the
-- engine: same columns, types (settle.status included), NOT NULLs, defaults, identity, primary
-- keys and the partial indexes of operations; the fillfactors are added here (LIKE copies
-- none). The engine has no foreign key (its guard trigger checks an attempt's references to
-- its operation, 00002/00004), and neither have these tables. LIKE copies no trigger, no row rule and no RLS; the audit event
-- column is plain text here (the engine's domain settle_private.audit_event carries the
-- validation `event_is_known`). As in the engine, a settled cycle writes no audit_log row: the
-- attempt row logs the claim that opened it (claim_*) and the success that settled through it
-- (settled_*, with settled_as, a plain column the writer sets), their audit ids drawn from
-- spec4_audit_log's identity sequence; spec4_audit_log stays, empty, so the shapes match the
-- engine's. What the engine spends over this baseline is its own overhead, not the
-- specification's.
create table bench.spec4_operations (like settle_private.operations including defaults including identity including indexes)
  with (fillfactor = 80);

create table bench.spec4_attempts (
  like settle_private.attempts including defaults including identity including generated including indexes
) with (fillfactor = 80);

create table bench.spec4_audit_log (like settle_private.audit_log including defaults including identity including indexes);
alter table bench.spec4_audit_log alter column event type text;

-- pkread: the plain primary-key read the replay target compares a claim of a completed key
-- with. The replay run pre-completes its keys through the API; the pkread run copies the same
-- operation rows here, so both read a table of the same size, rows and primary key.
create table bench.pkread (like settle_private.operations including defaults including indexes)
  with (fillfactor = 80);
