-- replay: claims of already completed keys (the read path). The runner pre-completes
-- keys replay-1 .. replay-:replay_keys with the same request before the run.
\set i random(1, :replay_keys)
SELECT c.settled_attempt
  FROM settle.claim(tenant => 'bench', key => 'replay-' || :i::text,
                    request => jsonb_build_object('amount', :i::integer, 'currency', 'EUR'),
                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                    lease => interval '30 seconds', worker => 'pgbench') c
 WHERE c.outcome = 'replay' \gset
