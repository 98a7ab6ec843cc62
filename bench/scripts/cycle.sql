-- cycle: claim + complete on a fresh key, two transactions (the external-effect path).
-- A claim that is not `acquired` or a complete that is not `settled` returns no row, and
-- \gset then aborts the run: unexpected outcomes can never pass as throughput.
\set k random(100000000000, 999999999999)
SELECT c.attempt, c.lease_token, c.fingerprint
  FROM settle.claim(tenant => 'bench', key => 'op-' || :k::text || '-' || :client_id::text,
                    request => jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                    lease => interval '30 seconds', worker => 'pgbench') c
 WHERE c.outcome = 'acquired' \gset
SELECT r.outcome AS complete_outcome
  FROM settle.complete(tenant => 'bench', key => 'op-' || :k::text || '-' || :client_id::text,
                       attempt => :attempt::integer, lease_token => :lease_token::uuid, fingerprint => :fingerprint::text,
                       principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                       result => jsonb_build_object('charge', 'ch-' || :k::text)) r
 WHERE r.outcome = 'settled' \gset
