-- in-progress: a retry of a key whose first attempt still holds its lease (a retry storm while
-- the effect runs). Each client's first claim acquires its key with a one-hour lease, every
-- later one answers in_progress from the first read; any other outcome aborts the run.
SELECT c.outcome AS claim_outcome
  FROM settle.claim(tenant => 'bench', key => 'in-progress-' || :client_id::text,
                    request => jsonb_build_object('amount', 1250, 'currency', 'EUR'),
                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                    lease => interval '1 hour', worker => 'pgbench') c
 WHERE c.outcome IN ('acquired', 'in_progress') \gset
