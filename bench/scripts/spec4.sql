-- spec4 baseline: the rows one `cycle` writes (bench/sql/baselines.sql: copies of the engine's
-- operations, attempts and audit_log shapes), written by plain SQL with no PL/pgSQL, no
-- triggers and no validation, in two durable transactions like cycle.sql. Each transaction is
-- ONE statement, so it costs one round trip, like the engine's settle.claim and settle.complete
-- calls.
-- Transaction 1 (the claim): the operation row (running, leased, request and fingerprint) with
-- its attempt 1 and the log of the claim (claim_seq 1, an audit id, running after). Transaction
-- 2 (the complete): the operation completed with its result and its settlement, which is also
-- the log of the settlement (settled_seq 2, an audit id, the status before, the reason, the
-- login). As in the engine, a settled cycle writes no attempts row and no audit_log row. The
-- audit ids come from the identity sequence of bench.spec4_audit_log, as the engine's come from
-- audit_log's. A statement that writes nothing returns no row and \gset aborts the run, as in
-- cycle.sql.
\set k random(100000000000, 999999999999)
WITH req AS (
  SELECT jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR') AS request, gen_random_uuid() AS token
)
INSERT INTO bench.spec4_operations
  (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
   attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
   status, lease_token, lease_expires_at, updated_at)
SELECT 'bench', 'op-' || :k::text || '-' || :client_id::text,
       'v1:' || encode(sha256(convert_to(req.request::text, 'UTF8')), 'hex'), req.request,
       'bench-app', array['payments.write'], 0, 5, now(),
       1, req.token, 'pgbench', now(), session_user, 1, nextval('bench.spec4_audit_log_audit_id_seq'), 'running',
       'running', req.token, now() + interval '30 seconds', now()
  FROM req
RETURNING attempt \gset
UPDATE bench.spec4_operations o
   SET status = 'completed', result = jsonb_build_object('charge', 'ch-' || :k::text),
       settled_attempt = :attempt::integer, settled_at = now(), settled_seq = 2,
       settled_audit_id = nextval('bench.spec4_audit_log_audit_id_seq'), settled_status_before = 'running',
       settled_reason = 'current_attempt', settled_by = session_user, lease_token = NULL, lease_expires_at = NULL,
       updated_at = now()
 WHERE o.tenant = 'bench' AND o.key = 'op-' || :k::text || '-' || :client_id::text AND o.status = 'running'
RETURNING o.settled_reason AS complete_reason \gset
