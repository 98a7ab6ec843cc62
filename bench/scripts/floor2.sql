-- floor2 baseline: two single-row durable writes in two transactions per operation, the
-- physical floor of any claim-then-settle protocol (claim durable before the effect,
-- settlement durable after it).
\set k random(100000000000, 999999999999)
INSERT INTO bench.floor2 (key, claimed_at) VALUES ('op-' || :k::text || '-' || :client_id::text, now());
UPDATE bench.floor2 SET settled_at = now(), result = jsonb_build_object('charge', 'ch-' || :k::text)
 WHERE key = 'op-' || :k::text || '-' || :client_id::text;
