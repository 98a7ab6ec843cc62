-- The plain-SQL side of bench/sql/cycle-cpu-loop.sql: the same 3000 operations, each writing
-- exactly the rows one engine cycle writes (bench/scripts/spec4.sql: the operation row with
-- its attempt 1, which logs the claim; then the operation completed, which logs the
-- settlement; no attempts row and no audit_log row) into the spec4 tables (bench/sql/baselines.sql:
-- the engine tables' shapes, no PL/pgSQL API, triggers, RLS or validation), inside one DO
-- block, so no WAL flush, no round trip and no client is measured. The fingerprint is
-- computed as spec4.sql does.
-- The bench's `cpu` scenario runs both loops in the same run and reports the ratio (target:
-- the engine's server CPU per cycle <= 2x this loop's):
--
--   psql -d <database with bench/sql/baselines.sql> -f bench/sql/spec4-cpu-loop.sql
\timing on
do $$
declare
  k text;
  v_req jsonb;
  v_token uuid;
begin
  for i in 1..3000 loop
    k := 'cpu-loop-' || i || '-' || random();
    v_req := jsonb_build_object('amount', i, 'currency', 'EUR');
    v_token := gen_random_uuid();
    insert into bench.spec4_operations
      (tenant, key, fingerprint, request, principal, scopes, binding_generation, max_attempts, created_at,
       attempt, attempt_token, worker, claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after,
       status, lease_token, lease_expires_at, updated_at)
    values ('bench', k, 'v1:' || encode(sha256(convert_to(v_req::text, 'UTF8')), 'hex'), v_req,
            'bench-app', array['payments.write'], 0, 5, now(),
            1, v_token, 'loop', now(), session_user, 1, nextval('bench.spec4_audit_log_audit_id_seq'), 'running',
            'running', v_token, now() + interval '30 seconds', now());
    update bench.spec4_operations o
       set status = 'completed', result = jsonb_build_object('charge', 'ch-' || i), settled_attempt = 1,
           settled_at = now(), settled_seq = 2, settled_audit_id = nextval('bench.spec4_audit_log_audit_id_seq'),
           settled_status_before = 'running', settled_reason = 'current_attempt', settled_by = session_user,
           lease_token = null, lease_expires_at = null, updated_at = now()
     where o.tenant = 'bench' and o.key = k and o.status = 'running';
  end loop;
end $$;
