-- The server CPU of the cycle without commits: 3000 claim + complete pairs inside one DO
-- block, so no WAL flush, no network round trip and no client is measured, only the engine's
-- own work (PL/pgSQL, triggers, row rules, index and heap writes). Run it several times and
-- keep the minimum (shared machines are noisy):
--
--   psql -d <migrated database> -f bench/sql/cycle-cpu-loop.sql
--
-- docs/performance.md ("Server CPU per cycle") compares engine variants with it.
\timing on
do $$
declare
  c record;
  r record;
  k text;
begin
  for i in 1..3000 loop
    k := 'cpu-loop-' || i || '-' || random();
    select * into c from settle.claim(tenant => 'bench', key => k,
      request => jsonb_build_object('amount', i, 'currency', 'EUR'), principal => 'bench-app',
      scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'loop');
    select * into r from settle.complete(tenant => 'bench', key => k, attempt => c.attempt,
      lease_token => c.lease_token, fingerprint => c.fingerprint, principal => 'bench-app',
      scopes => array['payments.write'], binding_generation => 0, result => jsonb_build_object('charge', 'ch-' || i));
    if r.outcome <> 'settled' then
      raise exception 'cycle % answered %', i, r.outcome;
    end if;
  end loop;
end $$;
