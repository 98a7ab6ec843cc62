-- proto: the lean prototype's claim + complete on a fresh key, two transactions
-- (bench/sql/prototype.sql, schema p; the ladder's step s0). The keys, request, binding, lease,
-- worker and result of cycle.sql; a claim that is not `acquired` or a complete that is not
-- `settled` returns no row, and \gset then aborts the run.
\set k random(100000000000, 999999999999)
SELECT c.op_id, c.attempt, c.lease_token
  FROM p.claim(p_tenant => 'bench', p_key => 'op-' || :k::text || '-' || :client_id::text,
               p_request => jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
               p_principal => 'bench-app', p_gen => 0, p_lease => interval '30 seconds', p_worker => 'pgbench') c
 WHERE c.outcome = 'acquired' \gset
SELECT r.outcome AS complete_outcome
  FROM p.complete(p_op => :op_id::bigint, p_attempt => :attempt::integer, p_token => :lease_token::uuid,
                  p_request => jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
                  p_principal => 'bench-app', p_gen => 0, p_result => jsonb_build_object('charge', 'ch-' || :k::text)) r
 WHERE r.outcome = 'settled' \gset
