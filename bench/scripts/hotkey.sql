-- hotkey: many clients on a handful of keys. The key of slot :slot changes every
-- :epoch_ms milliseconds (an epoch); in each epoch exactly one claim per key may be
-- `acquired`, its holder completes it, every other claim answers in_progress or replay.
\set slot random(1, :hot_keys)
SELECT c.outcome AS claim_outcome, (c.outcome = 'acquired')::int AS acquired,
       coalesce(c.attempt, 0) AS attempt, coalesce(c.lease_token::text, '') AS lease_token,
       coalesce(c.fingerprint, '') AS fingerprint, c.hot_key
  FROM (SELECT 'hot-' || :slot::text || '-' || floor(extract(epoch FROM clock_timestamp()) * 1000 / :epoch_ms::integer)::bigint::text AS hot_key) h,
       LATERAL (SELECT h.hot_key, x.*
                  FROM settle.claim(tenant => 'hot', key => h.hot_key,
                                    request => jsonb_build_object('slot', :slot::integer),
                                    principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                                    lease => interval '30 seconds', worker => 'pgbench') x) c
 WHERE c.outcome IN ('acquired', 'in_progress', 'replay') \gset
\if :acquired
SELECT r.outcome AS complete_outcome
  FROM settle.complete(tenant => 'hot', key => :hot_key::text, attempt => :attempt::integer, lease_token => :lease_token::uuid,
                       fingerprint => :fingerprint::text, principal => 'bench-app', scopes => array['payments.write'],
                       binding_generation => 0, result => jsonb_build_object('slot', :slot::integer)) r
 WHERE r.outcome = 'settled' \gset
\endif
