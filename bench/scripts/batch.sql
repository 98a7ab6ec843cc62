-- batch: settle.claim_many of :batch_keys fresh keys, then settle.complete_many of them: two
-- transactions, like cycle, for :batch_keys keys at once. Each key is its own operation with its
-- own attempt, lease, settlement and feed event. A batch in which any claim is not `acquired` or
-- any complete not `settled` returns no row (HAVING), and \gset then aborts the run.
\set k random(100000000000, 999999999999)
SELECT array_agg(c.attempt ORDER BY c.ordinal) AS attempts, array_agg(c.lease_token ORDER BY c.ordinal) AS lease_tokens,
       array_agg(c.fingerprint ORDER BY c.ordinal) AS fingerprints
  FROM settle.claim_many(tenant => 'bench',
                         keys => array(SELECT 'op-' || :k::text || '-' || :client_id::text || '-' || g
                                         FROM generate_series(1, :batch_keys::integer) g),
                         requests => array(SELECT jsonb_build_object('amount', g, 'currency', 'EUR')
                                             FROM generate_series(1, :batch_keys::integer) g),
                         principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                         lease => interval '30 seconds', worker => 'pgbench') c
HAVING count(*) FILTER (WHERE c.outcome = 'acquired') = :batch_keys::integer \gset
SELECT count(*) AS settled
  FROM settle.complete_many(tenant => 'bench',
                            keys => array(SELECT 'op-' || :k::text || '-' || :client_id::text || '-' || g
                                            FROM generate_series(1, :batch_keys::integer) g),
                            attempts => :attempts::integer[], lease_tokens => :lease_tokens::uuid[],
                            fingerprints => :fingerprints::text[],
                            principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                            results => array(SELECT jsonb_build_object('charge', 'ch-' || :k::text || '-' || g)
                                               FROM generate_series(1, :batch_keys::integer) g)) r
 WHERE r.outcome = 'settled'
HAVING count(*) = :batch_keys::integer \gset
