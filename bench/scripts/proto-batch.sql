-- proto-batch: the lean prototype's p.claim_many of :batch_keys fresh keys, then p.complete_many
-- of them (bench/sql/prototype-batch.sql): two transactions for :batch_keys keys, like batch.sql.
-- The keys and requests of batch.sql; a batch in which any key is not acquired returns no row
-- (HAVING), one that settles fewer than :batch_keys none (WHERE), and \gset then aborts the run.
\set k random(100000000000, 999999999999)
SELECT array_agg(c.op_id) AS op_ids, array_agg(c.attempt) AS attempts, array_agg(c.lease_token) AS lease_tokens
  FROM p.claim_many('bench',
                    array(SELECT 'op-' || :k::text || '-' || :client_id::text || '-' || g
                            FROM generate_series(1, :batch_keys::integer) g),
                    array(SELECT jsonb_build_object('amount', g, 'currency', 'EUR')
                            FROM generate_series(1, :batch_keys::integer) g),
                    'bench-app', 0) c
HAVING count(*) = :batch_keys::integer \gset
SELECT s AS settled
  FROM p.complete_many(:op_ids::bigint[], :attempts::integer[], :lease_tokens::uuid[],
                       array(SELECT jsonb_build_object('charge', 'ch-' || :k::text || '-' || g)
                               FROM generate_series(1, :batch_keys::integer) g)) s
 WHERE s = :batch_keys::integer \gset
