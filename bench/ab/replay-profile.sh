#!/usr/bin/env bash
# Where a replay's instructions go: valgrind (callgrind) over N replays of settle.claim on
# completed keys, each its own transaction (COMMIT after every call, so PL/pgSQL's
# per-transaction set-up is counted), in a single-user backend of a throwaway cluster migrated
# from sql/migrations. Prints the inclusive cost by function (callgrind_annotate --inclusive):
# read a function's share as its inclusive count over the replays procedure's.
#
#   bench/ab/replay-profile.sh
#   N=400 VGDIR=/tmp/settle-vg-replay VGPORT=34998 bench/ab/replay-profile.sh
#
# Needs valgrind and the Debian PostgreSQL 15 binaries; runs the server as user postgres when
# started as root. About 3 minutes on this machine.
set -euo pipefail
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
D=${VGDIR:-$(mktemp -d /tmp/settle-vg-replay.XXXXXX)}
N=${N:-400}
PORT=${VGPORT:-34998}
MIGRATIONS=$(cd "$(dirname "$0")/../../sql/migrations" && pwd)
rm -rf "$D/data"; mkdir -p "$D"
RUN=()
if [ "$(id -u)" = 0 ]; then chown postgres "$D"; RUN=(runuser -u postgres --); fi
"${RUN[@]}" $BIN/initdb -D $D/data -U postgres -A trust -E UTF8 --no-sync >/dev/null
"${RUN[@]}" $BIN/pg_ctl -D $D/data -l $D/server.log -w -o "-p $PORT -k $D -c listen_addresses='' -c fsync=off" start >/dev/null
psql -X -q -h $D -p $PORT -U postgres -d postgres -c "create database vg"
for f in "$MIGRATIONS"/*.sql; do (echo 'begin;'; cat "$f"; echo 'commit;') | psql -X -q -h $D -p $PORT -U postgres -v ON_ERROR_STOP=1 -d vg >/dev/null; done
psql -X -q -h $D -p $PORT -U postgres -d vg -v ON_ERROR_STOP=1 <<'SQL'
create procedure public.seed(n integer) language plpgsql as $$
declare c record; r record;
begin
  for i in 1..n loop
    select * into c from settle.claim(tenant => 'bench', key => 'k' || i, request => jsonb_build_object('amount', i, 'currency', 'EUR'),
      principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'vg');
    select * into r from settle.complete(tenant => 'bench', key => 'k' || i, attempt => c.attempt, lease_token => c.lease_token,
      fingerprint => c.fingerprint, principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
      result => jsonb_build_object('charge', i));
    if r.outcome <> 'settled' then raise exception 'complete %', r.outcome; end if;
    commit;
  end loop;
end $$;
create procedure public.replays(n integer) language plpgsql as $$
declare c record;
begin
  for i in 1..n loop
    select * into c from settle.claim(tenant => 'bench', key => 'k' || i, request => jsonb_build_object('amount', i, 'currency', 'EUR'),
      principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'vg');
    if c.outcome <> 'replay' then raise exception 'replay %', c.outcome; end if;
    commit;
  end loop;
end $$;
SQL
psql -X -q -h $D -p $PORT -U postgres -d vg -v ON_ERROR_STOP=1 -c "call public.seed($N)" -c "vacuum analyze"
"${RUN[@]}" $BIN/pg_ctl -D $D/data -m fast stop >/dev/null
# One unmeasured run compiles the functions' plans' first use outside the profile's loop.
echo "call public.replays(5);" | "${RUN[@]}" $BIN/postgres --single -D $D/data -c fsync=off vg >/dev/null 2>&1
echo "call public.replays($N);" | "${RUN[@]}" valgrind --tool=callgrind --callgrind-out-file=$D/cg.out \
  $BIN/postgres --single -D $D/data -c fsync=off -c synchronous_commit=off vg >/dev/null 2>$D/cg.log
callgrind_annotate --inclusive=yes $D/cg.out 2>/dev/null | head -80
