-- 00002: the status type, the private tables, their indexes and row-level security.
--
-- Why: the canonical outcome of an operation must never regress, whoever writes to it. The
-- tables below hold it; the rules that keep it (the lattice, the guard triggers, the row
-- rules) are in 00004, the protocol that writes it in 00006-00012.
--   operations  one canonical record per (tenant, key): the immutable reservation lock, the
--               lattice status, the current attempt epoch (its identity, the log of the claim
--               that opened it, its lease), the immutable result and the log of the one
--               settlement;
--   attempts    the record of an attempt that ended, was observed or was superseded: its
--               identity and claim log (copied from the operation when the record is written)
--               and its own terminal observation (the attempt-scoped settlement lock). The
--               current attempt of an operation has no row here until one of those happens: a
--               cycle whose first attempt settles writes the operation only;
--   audit_log   append-only evidence of every other call (refusals, fences, conflicts,
--               expiries, redrives, purges ...), written in the caller's transaction.
--
-- Every table that belongs to an operation carries (tenant, key) and its keys include them,
-- so the engine can be sharded by operation key (SCALE-OUT: primary keys, foreign keys and
-- identity columns follow the distribution column).

set local role settle_owner;

-- The order of these labels is the lattice and it matters: pending and running share
-- rank 1 (lease bookkeeping), then unknown < conflict < failed < completed.
create type settle.status as enum ('pending', 'running', 'unknown', 'conflict', 'failed', 'completed');
comment on type settle.status is
  'Canonical operation status, declared in lattice order (the order matters): pending/running (rank 1) < unknown (2) < conflict (3) < failed (4) < completed (5). See settle.status_rank.';

create table settle_private.operations (
  tenant text not null,
  key text not null,
  fingerprint text not null,
  request jsonb not null,
  principal text not null,
  scopes text[] not null,
  binding_generation bigint not null,
  -- Columns a settlement never changes come first, those it changes last: an UPDATE whose new
  -- version stays on the page logs only the bytes between the longest unchanged prefix and
  -- suffix of the row (heap_update's prefix/suffix compression), so the settling UPDATE logs
  -- from status on.
  max_attempts integer not null,
  created_at timestamptz not null,
  redrive_count integer not null default 0,
  -- The current attempt epoch: its number, its own token (its lease token while it holds the
  -- lease; it never changes for the attempt), the worker the caller named, and the log of the
  -- claim that opened it (its place in the operation's history, seq and audit_id as in
  -- audit_log, and the statuses around it; settle.audit_log shows it as `claim:acquired`).
  -- claimed_by is the authenticated login (session_user) of that claim, set by the guard
  -- trigger (00004) whatever the writer passes. (A resolution's own epoch, 00014, has no claim
  -- log: claim_seq and claim_audit_id NULL.) A new attempt epoch replaces them, once the record
  -- of the attempt it supersedes is in settle_private.attempts (the guard checks).
  attempt integer not null,
  attempt_token uuid not null,
  worker text,
  claimed_at timestamptz not null,
  claimed_by text,
  claim_seq bigint,
  claim_audit_id bigint,
  claim_status_before settle.status,
  claim_status_after settle.status,
  status settle.status not null,
  lease_token uuid,
  lease_expires_at timestamptz,
  result jsonb,
  -- The one settlement of the operation: the attempt whose success settled it, and the log of
  -- that success (complete:settled in settle.audit_log: its place in the history, the status
  -- it settled from, why that attempt settled, and the login that settled it, set by the guard).
  settled_attempt integer,
  settled_at timestamptz,
  settled_seq bigint,
  settled_audit_id bigint,
  settled_status_before settle.status,
  settled_reason text,
  settled_by text,
  error jsonb,
  dead_lettered_at timestamptz,
  dead_letter_reason text,
  updated_at timestamptz not null,
  -- The one unique index of the table. No other key: the attempts' guard (00004) holds every
  -- writer to an attempt's reference to its operation with a plain read.
  constraint operations_pkey primary key (tenant, key)
) with (fillfactor = 80);

comment on table settle_private.operations is
  'Canonical record per (tenant, key): the immutable reservation lock, the lattice status, the current attempt epoch (its identity, claim log and lease), the immutable result and the log of the one settlement. Private: use the settle API.';

-- The lease sweeper (settle.expire_leases) finds lapsed leases through this index only.
create index operations_by_lease_expiry_idx
  on settle_private.operations (lease_expires_at)
  where lease_token is not null;

-- Retention (settle.purge) and the dead-letter view scan terminal records by age.
create index operations_terminal_by_age_idx
  on settle_private.operations (updated_at)
  where status in ('failed', 'completed');

-- The operations that wait for someone: unleased and unfinished (pending: for the next claim;
-- unknown or conflict: for a success, a reconciler or an operator), and the dead letters.
-- settle.metrics counts and ages the unknown, conflicting and dead-lettered ones through it, and
-- the sweeper (settle.expire_leases, 00009) finds the unfinished operations whose attempt budget
-- is spent through it, so a scrape or a sweep reads this set, never all operations: it costs the
-- same at 10 million operations as at 10 (docs/observability.md). No row of the hot path
-- (running, completed) is in it.
-- One index with a short predicate, not one per consumer: every INSERT or UPDATE of operations
-- opens every index of the table and prepares and tests each partial index's predicate, whether
-- or not the row enters it. The price: the retry backlog (pending operations) is in the index,
-- so the sweeper also steps over it (the dead-letter gauges name their statuses and read only
-- those ranges of it, 00011).
create index operations_needing_attention_idx
  on settle_private.operations (status, updated_at)
  where status in ('pending', 'unknown', 'conflict') or dead_lettered_at is not null;

create table settle_private.attempts (
  tenant text not null,
  key text not null,
  attempt integer not null,
  -- The attempt's identity and the log of its claim, as the operation held them while it was
  -- the current attempt (claimed_by: the login of that claim). Never changed (guard, 00004).
  lease_token uuid not null,
  worker text,
  claimed_at timestamptz not null,
  claimed_by text,
  claim_seq bigint,
  claim_audit_id bigint,
  claim_status_before settle.status,
  claim_status_after settle.status,
  -- Its end and its own terminal observation (at most one: the attempt-scoped settlement lock).
  -- The attempt that settled the operation (its settled_attempt) observed `completed`: that is
  -- the operation's record (settle.attempts shows it), not written here.
  ended_at timestamptz,
  end_reason text,
  observation settle.status,
  observed_at timestamptz,
  retryable boolean,
  error jsonb,
  late_result jsonb,
  -- An attempt belongs to an operation (attempts_belong_to_operation), checked by the guard of
  -- attempts (00004) with the SQLSTATE and constraint name of a foreign key (23503) rather than
  -- by a foreign key: a foreign-key check locks the operation row (FOR KEY SHARE), a WAL record
  -- per check; and the guard, unlike a foreign key, also fires under
  -- session_replication_role = replica. The operation row cannot go away under an attempt: only
  -- settle.purge deletes, with both rows locked.
  constraint attempts_pkey primary key (tenant, key, attempt)
) with (fillfactor = 80);

comment on table settle_private.attempts is
  'The record of each attempt epoch that ended, was observed or was superseded: its lease token, worker and claim log (claim_*) as its operation held them, its end and its own attempt-scoped terminal observation. The current attempt of an operation is on the operation row until then; settle.attempts shows every attempt, the settlement included. Private: use the settle API.';


-- The events an audit row may record. A domain rather than a CHECK constraint on the table:
-- PostgreSQL 15 reads a table's CHECK constraints back from their node strings and plans them
-- again for every INSERT statement (ExecRelCheck: stringToNode and ExecPrepareExpr per result
-- relation), about 8 us per audit row here (docs/performance.md); a domain's constraint is
-- kept compiled in the type cache. Same name, same SQLSTATE (23514 check_violation), same rule
-- for every writer.
create domain settle_private.audit_event as text
  constraint event_is_known check (value in (
    'claim', 'heartbeat', 'complete', 'fail', 'report_unknown', 'expire', 'redrive', 'purge', 'get', 'revoke',
    'resolve'));

create table settle_private.audit_log (
  tenant text not null,
  key text not null,
  -- Position in the operation's history: the order of its audit rows is (seq, audit_id).
  -- settle_private._audit numbers the events of one operation 1, 2, 3 ..., counting those
  -- logged on its operation and attempt rows (claim_seq, settled_seq) with the rows here. Rows written under the
  -- operation's row lock (every change) get consecutive numbers in commit order; an answer
  -- that changed nothing and took no lock (a replaying, in_progress, conflict or failed claim)
  -- may share its number with the transition it raced, and audit_id breaks that tie.
  -- audit_id alone is no order: on Citus each node draws identities from its own range, and a
  -- key's rows are written by its worker (delegated calls) or by the coordinator (calls in a
  -- transaction block, nested steps), so a later row can carry a smaller audit_id.
  seq bigint not null,
  audit_id bigint generated always as identity,
  at timestamptz not null,
  event settle_private.audit_event not null,
  outcome text not null,
  attempt integer,
  status_before settle.status,
  status_after settle.status,
  -- The caller-supplied name (a claim's worker) or the admin login that acted; `login` is
  -- always the authenticated login role (session_user) of the call that wrote the row.
  actor text,
  detail jsonb,
  login text,
  constraint audit_log_pkey primary key (tenant, key, seq, audit_id)
);

-- settle.metrics counts the recent refusals (conflicts, fenced observations) through this
-- partial index: it holds the refusals only, never the rows of a normal claim or settlement.
create index audit_log_refusals_by_at_idx
  on settle_private.audit_log (at, outcome, event)
  where outcome in ('conflict', 'fenced');

-- Retention of purged keys (settle.purge, 00012) finds the tombstones by age through this
-- index: it holds one row per purged key.
create index audit_log_tombstones_by_at_idx
  on settle_private.audit_log (at)
  where event = 'purge';

-- Evidence beyond the first refusal_rows (20) refused, fenced or conflicting rows of one key
-- (settle_private._audit, 00006): one row per key that counts them, with the first and last
-- time, the last call's event, outcome, login and actor, and a chained SHA-256 of every folded
-- row's detail. A flood of calls on one key writes a bounded amount.
create table settle_private.audit_overflow (
  tenant text not null,
  key text not null,
  refusals bigint not null,
  first_at timestamptz not null,
  last_at timestamptz not null,
  last_event text not null,
  last_outcome text not null,
  last_login text,
  last_actor text,
  digest bytea not null,
  constraint audit_overflow_pkey primary key (tenant, key)
);
comment on table settle_private.audit_overflow is
  'Per key, the refused, fenced and conflicting calls beyond the first 20 kept in full in audit_log: their count, first and last time, the last one''s event, outcome, login and actor, and a chained SHA-256 of their details. Private: read settle.audit_overflow.';

comment on table settle_private.audit_log is
  'Append-only audit trail, one row per claim (but none for the read-only answers replay and in_progress, and none for a claim that opened an attempt: that one is logged on its attempt), observation (but none for the success that settled: logged on its operation), fence, conflict, expiry, redrive and purge, written in the same transaction. settle.audit_log shows both in one order. UPDATE, DELETE (outside settle.purge) and TRUNCATE are refused.';

-- Access (00007_access.sql): tenant bindings of login roles, revocation floors of binding
-- generations, and the log of changes to both. Small, global and rarely written: on a sharded
-- cluster they are reference tables (copied to every node, read locally by every call).
create table settle_private.tenant_bindings (
  -- The role itself: a binding follows its role through a rename (ALTER ROLE ... RENAME).
  role_oid oid not null,
  -- The role's name when the binding was last written (every settle.grant_tenant and
  -- settle.revoke_tenant refreshes the names of all bindings). A second key, fail closed: a
  -- login whose name is recorded here under another OID (the bound role was dropped and a new
  -- one created with its name, or a name passed to another role by a rename) is held to this
  -- binding too, never widened, until an administrator rebinds it (docs/protocol.md §12).
  role_name text not null,
  tenants text[] not null,
  bound_at timestamptz not null,
  updated_at timestamptz not null,
  constraint tenant_bindings_pkey primary key (role_oid)
);
create index tenant_bindings_by_role_name_idx on settle_private.tenant_bindings (role_name);
comment on table settle_private.tenant_bindings is
  'Tenant binding of login roles, by role OID (a rename keeps it) and, fail closed, by the name recorded with it: a login matching a row by OID or by name reaches only the tenants every matching row lists (none when empty). Private: use settle.grant_tenant / settle.revoke_tenant.';

create table settle_private.binding_floors (
  tenant text not null,
  principal text not null,
  below_generation bigint not null,
  revoked_at timestamptz not null,
  constraint binding_floors_pkey primary key (tenant, principal),
  constraint below_generation_positive check (below_generation >= 1)
);
comment on table settle_private.binding_floors is
  'Revocation floor per (tenant, principal): binding generations below below_generation are revoked. Only rises. Private: use settle.revoke_binding.';

-- The administrative changes, one row each: access (00007: grant_tenant, revoke_tenant,
-- revoke_binding), settings (00012: set_purge_min_retention; 00014: set_retention,
-- set_upkeep_interval, set_in_doubt_after) and feed consumers (00013: register_consumer, drop_consumer,
-- reset_consumer).
create table settle_private.admin_log (
  log_id bigint generated always as identity,
  at timestamptz not null,
  event text not null,
  actor text not null,
  detail jsonb not null,
  constraint admin_log_pkey primary key (log_id),
  constraint admin_event_is_known check (event in ('grant_tenant', 'revoke_tenant', 'revoke_binding',
                                                 'set_purge_min_retention', 'set_retention', 'set_upkeep_interval',
                                                 'set_in_doubt_after', 'register_consumer', 'drop_consumer',
                                                 'reset_consumer'))
);
comment on table settle_private.admin_log is
  'Append-only log of administrative changes: tenant grants and revocations, binding revocations, engine settings, feed consumers. UPDATE, DELETE and TRUNCATE are refused.';

-- Engine settings an operator changes through the API (settle.set_purge_min_retention), read
-- by the functions that need them: never session settings, which do not reach Citus workers and
-- which a caller could set. One row per setting; a reference table on a sharded cluster.
create table settle_private.settings (
  name text not null,
  value interval not null,
  updated_at timestamptz not null,
  constraint settings_pkey primary key (name),
  constraint setting_is_known check (name in ('purge_min_retention', 'retention', 'in_doubt_after')),
  constraint setting_not_negative check (value >= interval '0')
);
comment on table settle_private.settings is
  'Engine settings: purge_min_retention (default 24 hours), the shortest older_than settle.purge accepts. Private: change it with settle.set_purge_min_retention (logged in admin_log).';

-- Row-level security, forced so that it binds the owner too: only the owner role (through
-- the SECURITY DEFINER API) reaches rows. Superusers bypass RLS but not the guard triggers (00004).
alter table settle_private.operations enable row level security;
alter table settle_private.operations force row level security;
alter table settle_private.attempts enable row level security;
alter table settle_private.attempts force row level security;
alter table settle_private.audit_log enable row level security;
alter table settle_private.audit_log force row level security;
alter table settle_private.audit_overflow enable row level security;
alter table settle_private.audit_overflow force row level security;
create policy owner_only on settle_private.audit_overflow to settle_owner using (true) with check (true);
create policy owner_only on settle_private.operations to settle_owner using (true) with check (true);
create policy owner_only on settle_private.attempts to settle_owner using (true) with check (true);
create policy owner_only on settle_private.audit_log to settle_owner using (true) with check (true);
alter table settle_private.tenant_bindings enable row level security;
alter table settle_private.tenant_bindings force row level security;
alter table settle_private.binding_floors enable row level security;
alter table settle_private.binding_floors force row level security;
alter table settle_private.settings enable row level security;
alter table settle_private.settings force row level security;
create policy owner_only on settle_private.settings to settle_owner using (true) with check (true);
alter table settle_private.admin_log enable row level security;
alter table settle_private.admin_log force row level security;
create policy owner_only on settle_private.tenant_bindings to settle_owner using (true) with check (true);
create policy owner_only on settle_private.binding_floors to settle_owner using (true) with check (true);
create policy owner_only on settle_private.admin_log to settle_owner using (true) with check (true);

revoke all on all tables in schema settle_private from public;

insert into settle_private.settings (name, value, updated_at)
values ('purge_min_retention', interval '24 hours', clock_timestamp());

reset role;
