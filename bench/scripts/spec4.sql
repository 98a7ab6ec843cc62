-- spec4 baseline: the rows one `cycle` writes (bench/sql/baselines.sql: copies of the engine's
-- operations, attempts and audit_log shapes), written by plain SQL with no PL/pgSQL, no
-- triggers and no validation, in two durable transactions like cycle.sql. Each transaction is
-- ONE statement (data-modifying CTEs), so it costs one round trip, like the engine's
-- settle.claim and settle.complete calls.
-- Transaction 1 (the claim): the operation row (running, leased, request and fingerprint), its
-- attempt 1 and the claim's audit row. Transaction 2 (the complete): the operation completed
-- with its result and settlement, the attempt's observation and settlement, the complete's
-- audit row. An audit insert depends on the rows before it; when they write nothing, the
-- statement returns no row and \gset aborts the run, as in cycle.sql.
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
), att AS (
  INSERT INTO bench.spec4_attempts (tenant, key, attempt, lease_token, worker, claimed_at)
  SELECT op.tenant, op.key, 1, op.lease_token, 'pgbench', now() FROM op
  RETURNING tenant, key, attempt, worker
)
INSERT INTO bench.spec4_audit_log (tenant, key, seq, at, event, outcome, attempt, status_before, status_after, actor, detail)
SELECT att.tenant, att.key, 1, now(), 'claim', 'acquired', att.attempt, NULL, 'running', att.worker,
       jsonb_build_object('reserved', true)
  FROM att
RETURNING attempt \gset
WITH op AS (
  UPDATE bench.spec4_operations o
     SET status = 'completed', result = jsonb_build_object('charge', 'ch-' || :k::text),
         settled_attempt = :attempt::integer, settled_at = now(), lease_token = NULL, lease_expires_at = NULL,
         updated_at = now()
   WHERE o.tenant = 'bench' AND o.key = 'op-' || :k::text || '-' || :client_id::text AND o.status = 'running'
  RETURNING o.tenant, o.key, o.settled_attempt
), att AS (
  UPDATE bench.spec4_attempts a
     SET observation = 'completed', observed_at = now(), settled = true, ended_at = now(), end_reason = 'observed'
    FROM op
   WHERE a.tenant = op.tenant AND a.key = op.key AND a.attempt = op.settled_attempt
  RETURNING a.tenant, a.key, a.attempt, a.worker
)
INSERT INTO bench.spec4_audit_log (tenant, key, seq, at, event, outcome, attempt, status_before, status_after, actor, detail)
SELECT att.tenant, att.key, 2, now(), 'complete', 'settled', att.attempt, 'running', 'completed', att.worker,
       jsonb_build_object('reason', 'current_attempt')
  FROM att
RETURNING outcome AS complete_outcome \gset
