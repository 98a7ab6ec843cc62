-- stripe baseline: the widely copied Stripe-style idempotency-key pattern
-- (brandur.org/idempotency-keys). Transaction 1 locks the key row with SELECT ... FOR UPDATE,
-- inserts it when missing (locked_at set), or compares the stored request parameters and
-- sets locked_at. Transaction 2 stores the response and clears the lock.
\set k random(100000000000, 999999999999)
BEGIN;
SELECT coalesce((SELECT id FROM bench.stripe_keys
                  WHERE user_id = :client_id::bigint AND idempotency_key = 'op-' || :k::text
                  FOR UPDATE), 0) AS key_id \gset
\if :key_id = 0
INSERT INTO bench.stripe_keys (idempotency_key, locked_at, request_method, request_params, request_path,
                               recovery_point, user_id)
VALUES ('op-' || :k::text, now(), 'POST', jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'),
        '/charges', 'started', :client_id::bigint)
RETURNING id AS key_id \gset
\else
SELECT (request_params = jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR'))::int AS params_match
  FROM bench.stripe_keys WHERE id = :key_id::bigint \gset
UPDATE bench.stripe_keys SET last_run_at = now(), locked_at = now() WHERE id = :key_id::bigint;
\endif
COMMIT;
BEGIN;
UPDATE bench.stripe_keys
   SET locked_at = NULL, recovery_point = 'finished', response_code = 201,
       response_body = jsonb_build_object('charge', 'ch-' || :k::text)
 WHERE id = :key_id::bigint;
COMMIT;
