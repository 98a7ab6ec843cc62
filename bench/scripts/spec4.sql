-- spec4 baseline: the rows one `cycle` writes (bench/sql/baselines.sql: copies of the engine's
-- operations, attempts and audit_log shapes), written by plain SQL with no PL/pgSQL, no
-- triggers and no validation, in two durable transactions like cycle.sql. Each transaction is
-- ONE statement (data-modifying CTEs), so it costs one round trip, like the engine's
-- settle.claim and settle.complete calls.
-- Transaction 1 (the claim): the operation row (running, leased, request and fingerprint) and
-- its attempt 1, which is also the log of the claim (claim_seq 1, an audit id, the statuses
-- before and after). Transaction 2 (the complete): the operation completed with its result
-- and settlement, the attempt's observation and settlement, which is also the log of the
-- settlement (settled_as, settled_seq 2, an audit id, the status before, the reason). As in
-- the engine, a settled cycle writes no audit_log row. The audit ids come from the identity
-- sequence of bench.spec4_audit_log, as the engine's come from audit_log's. Each attempt write
-- depends on the operation write before it; when that writes nothing, the statement returns
-- no row and \gset aborts the run, as in cycle.sql.
\set k random(100000000000, 999999999999)
WITH req AS (
  SELECT jsonb_build_object('amount', :k::bigint % 10000, 'currency', 'EUR') AS request
), op AS (
  INSERT INTO bench.spec4_operations
    (tenant, key, fingerprint, request, principal, scopes, binding_generation, status, attempt,
     max_attempts, lease_token, lease_expires_at, created_at, updated_at)
  SELECT 'bench', 'op-' || :k::text || '-' || :client_id::text,
         'v1:' || encode(sha256(convert_to(req.request::text, 'UTF8')), 'hex'), req.request,
         'bench-app', array['payments.write'], 0, 'running', 1, 5,
         gen_random_uuid(), now() + interval '30 seconds', now(), now()
    FROM req
  RETURNING tenant, key, lease_token
)
INSERT INTO bench.spec4_attempts
  (tenant, key, attempt, lease_token, worker, claimed_at, claim_seq, claim_audit_id, claim_status_before,
   claim_status_after)
SELECT op.tenant, op.key, 1, op.lease_token, 'pgbench', now(), 1, nextval('bench.spec4_audit_log_audit_id_seq'),
       NULL, 'running'
  FROM op
RETURNING attempt \gset
WITH op AS (
  UPDATE bench.spec4_operations o
     SET status = 'completed', result = jsonb_build_object('charge', 'ch-' || :k::text),
         settled_attempt = :attempt::integer, settled_at = now(), lease_token = NULL, lease_expires_at = NULL,
         updated_at = now()
   WHERE o.tenant = 'bench' AND o.key = 'op-' || :k::text || '-' || :client_id::text AND o.status = 'running'
  RETURNING o.tenant, o.key, o.settled_attempt
)
UPDATE bench.spec4_attempts a
   SET observation = 'completed', observed_at = now(), settled = true, settled_as = op.settled_attempt,
       ended_at = now(), end_reason = 'observed', settled_seq = 2,
       settled_audit_id = nextval('bench.spec4_audit_log_audit_id_seq'), settled_status_before = 'running',
       settled_reason = 'current_attempt'
  FROM op
 WHERE a.tenant = op.tenant AND a.key = op.key AND a.attempt = op.settled_attempt
RETURNING a.settled_reason AS complete_reason \gset
