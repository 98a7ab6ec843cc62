-- local: claim + in-database effect (a ledger insert) + complete, all in one transaction:
-- the effect and its settlement commit atomically.
\set k random(100000000000, 999999999999)
BEGIN;
SELECT c.attempt, c.lease_token, c.fingerprint
  FROM settle.claim(tenant => 'bench', key => 'op-' || :k::text || '-' || :client_id::text,
                    request => jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                    lease => interval '30 seconds', worker => 'pgbench') c
 WHERE c.outcome = 'acquired' \gset
INSERT INTO bench.ledger (tenant, key, amount)
VALUES ('bench', 'op-' || :k::text || '-' || :client_id::text, :k::bigint % 10000);
SELECT r.outcome AS complete_outcome
  FROM settle.complete(tenant => 'bench', key => 'op-' || :k::text || '-' || :client_id::text,
                       attempt => :attempt::integer, lease_token => :lease_token::uuid, fingerprint => :fingerprint::text,
                       principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                       result => jsonb_build_object('charge', 'ch-' || :k::text)) r
 WHERE r.outcome = 'settled' \gset
COMMIT;
