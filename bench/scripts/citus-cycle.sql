-- citus-cycle: the claim + complete cycle in the form Citus delegates to the worker that holds
-- the key: `SELECT ... FROM settle.<fn>(...)` with no WHERE clause and one FROM item (cycle.sql
-- filters on the outcome in a WHERE clause, which would keep every call on the coordinator).
-- Run unchanged against plain PostgreSQL for the comparison. Outcomes are checked after the
-- run (bench/citus.ts: one settlement per processed transaction).
\set k random(100000000000, 999999999999)
SELECT c.outcome AS claim_outcome, c.attempt, c.lease_token, c.fingerprint
  FROM settle.claim(tenant => 'bench-citus', key => 'op-' || :k::text || '-' || :client_id::text,
                    request => jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                    lease => interval '30 seconds', worker => 'pgbench') c \gset
SELECT r.outcome AS complete_outcome
  FROM settle.complete(tenant => 'bench-citus', key => 'op-' || :k::text || '-' || :client_id::text,
                       attempt => :attempt::integer, lease_token => :lease_token::uuid, fingerprint => :fingerprint::text,
                       principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                       result => jsonb_build_object('charge', 'ch-' || :k::text)) r \gset
