#!/usr/bin/env bash
# Where a replay's instructions go: valgrind (callgrind) over replays of settle.claim on
# completed keys, each its own transaction (COMMIT after every call, so PL/pgSQL's
# per-transaction set-up is counted), in a single-user backend of a throwaway cluster migrated
# from sql/migrations. Two loop lengths (N1, N2) run in fresh backends and each function's
# inclusive count is their difference divided by N2 - N1, so start-up and the first call's
# compilation cancel out. Prints the instructions per replay of the CALL's loop, then every
# function over 1% of it: its instructions per replay and its share.
#
#   bench/ab/replay-profile.sh
#   N1=40 N2=400 VGDIR=/tmp/settle-vg-replay VGPORT=34998 bench/ab/replay-profile.sh
#
# Needs valgrind and the Debian PostgreSQL 15 binaries; runs the server as user postgres when
# started as root. About a minute on this machine.
set -euo pipefail
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
D=${VGDIR:-$(mktemp -d /tmp/settle-vg-replay.XXXXXX)}
N1=${N1:-40}; N2=${N2:-400}
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
psql -X -q -h $D -p $PORT -U postgres -d vg -v ON_ERROR_STOP=1 -c "call public.seed($N2)" -c "vacuum analyze"
"${RUN[@]}" $BIN/pg_ctl -D $D/data -m fast stop >/dev/null
for n in $N1 $N2; do
  echo "call public.replays($n);" | "${RUN[@]}" valgrind --tool=callgrind --callgrind-out-file=$D/cg.$n \
    $BIN/postgres --single -D $D/data -c fsync=off -c synchronous_commit=off vg >/dev/null 2>$D/cg.$n.log
  callgrind_annotate --inclusive=yes --threshold=100 $D/cg.$n 2>/dev/null |
    sed -nE 's/^ *([0-9,]+) \([ 0-9.]+%\) +(.*)$/\1\t\2/p' | tr -d , | sort -t$'\t' -k2 > $D/by-function.$n
done
join -t$'\t' -1 2 -2 2 $D/by-function.$N1 $D/by-function.$N2 |
  awk -F'\t' -v d=$((N2 - N1)) '
    { per[$1] = ($3 - $2) / d }
    $1 ~ /:ExecuteCallStmt / { total = per[$1] }
    END { for (f in per) if (per[f] >= total / 100) printf "%d\t%.1f\t%s\n", per[f], 100 * per[f] / total, f }' |
  sort -t$'\t' -k1,1nr > $D/per-replay
printf '%s instructions per replay (the CALL loop: the claim, its SELECT and the COMMIT); by function:\n' \
  "$(grep -m1 ':ExecuteCallStmt ' $D/per-replay | cut -f1)"
awk -F'\t' '{ printf "%9d  %5.1f%%  %s\n", $1, $2, $3 }' $D/per-replay
