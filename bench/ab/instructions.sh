#!/usr/bin/env bash
# Instructions per call of engine builds, counted by valgrind (callgrind): deterministic, so a
# lever's effect reads to about 1% however busy the shared machine is (the CPU-time A/Bs of
# bench/ab/cpu-call.ts move 5-10% between rounds here). Each build is a directory of
# migrations; each is migrated into its own database of a throwaway cluster, then a
# single-user backend runs under callgrind a procedure that claims new keys (each call its own
# transaction: COMMIT after every call, so PL/pgSQL's per-transaction set-up is counted),
# completes them, and claims them again (replays). Two loop lengths (N1, N2) are run and their
# difference divided by N2 - N1, so start-up and first-call compilation cancel out. Prints the
# instructions per claim of a new key, per complete, per cycle and per replay.
#
#   bench/ab/instructions.sh <label>=<migrations dir> ...
#   N1=10 N2=40 VGDIR=/tmp/settle-vg VGPORT=34999 bench/ab/instructions.sh base=/tmp/mig-base lever=sql/migrations
#
# Needs valgrind and the Debian PostgreSQL 15 binaries; runs the server as user postgres when
# started as root. About 2 minutes per build on this machine (more when it is loaded).
set -euo pipefail
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
D=${VGDIR:-$(mktemp -d /tmp/settle-vg.XXXXXX)}
N1=${N1:-10}; N2=${N2:-40}
rm -rf "$D/data"; mkdir -p "$D"
RUN=()
if [ "$(id -u)" = 0 ]; then chown postgres "$D"; RUN=(runuser -u postgres --); fi
"${RUN[@]}" $BIN/initdb -D $D/data -U postgres -A trust -E UTF8 --no-sync >/dev/null
"${RUN[@]}" $BIN/pg_ctl -D $D/data -l $D/server.log -w -o "-p ${VGPORT:-34999} -k $D -c listen_addresses='' -c fsync=off" start >/dev/null
labels=()
for spec in "$@"; do
  l=${spec%%=*}; m=${spec#*=}; labels+=("$l")
  psql -X -q -h $D -p ${VGPORT:-34999} -U postgres -d postgres -c "create database vg_$l"
  # valgrind runs the backend ~50x slower: the claim's 5 ms "did this insert wait?" test would
  # always take the waited path; every build gets the same hour instead (10 s was once exceeded
  # by the first, compiling call on a loaded machine: a waited path in one run skews its count).
  for f in "$m"/*.sql; do (echo 'begin;'; sed "s/interval '5 milliseconds'/interval '1 hour'/g" "$f"; echo 'commit;') | psql -X -q -h $D -p ${VGPORT:-34999} -U postgres -v ON_ERROR_STOP=1 -d "vg_$l" >/dev/null; done
  psql -X -q -h $D -p ${VGPORT:-34999} -U postgres -d "vg_$l" -v ON_ERROR_STOP=1 <<'SQL'
create procedure public.bench(n integer, what text) language plpgsql as $$
declare c record; r record; k text;
begin
  for i in 1..n loop
    k := what || '-' || i || '-' || md5(random()::text);
    select * into c from settle.claim(tenant => 'bench', key => k, request => jsonb_build_object('amount', i, 'currency', 'EUR'),
      principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'vg');
    if c.outcome <> 'acquired' then raise exception 'claim %', c.outcome; end if;
    commit;
    if what <> 'claim' then
      select * into r from settle.complete(tenant => 'bench', key => k, attempt => c.attempt, lease_token => c.lease_token,
        fingerprint => c.fingerprint, principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
        result => jsonb_build_object('charge', k));
      if r.outcome <> 'settled' then raise exception 'complete %', r.outcome; end if;
      commit;
    end if;
    if what = 'replay' then
      select * into c from settle.claim(tenant => 'bench', key => k, request => jsonb_build_object('amount', i, 'currency', 'EUR'),
        principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0, lease => interval '30 seconds', worker => 'vg');
      if c.outcome <> 'replay' then raise exception 'replay %', c.outcome; end if;
      commit;
    end if;
  end loop;
end $$;
SQL
done
"${RUN[@]}" $BIN/pg_ctl -D $D/data -m fast stop >/dev/null
declare -A ir
for l in "${labels[@]}"; do
  # One unmeasured session first: the first backend on a database builds its relation cache
  # file and sets hint bits, which would land in whichever run came first.
  echo "call public.bench(5, 'replay');" | "${RUN[@]}" $BIN/postgres --single -D $D/data -c fsync=off "vg_$l" >/dev/null 2>&1
  for what in claim cycle replay; do
    for n in $N1 $N2; do
      out=$D/cg.$l.$what.$n
      echo "call public.bench($n, '$what');" | "${RUN[@]}" valgrind --tool=callgrind --callgrind-out-file=$out.out \
        $BIN/postgres --single -D $D/data -c fsync=off -c synchronous_commit=off "vg_$l" >/dev/null 2>$out.log || { cat $out.log | tail -5; exit 1; }
      ir[$l.$what.$n]=$(grep -m1 '^summary:' $out.out | awk '{print $2}')
    done
    per=$(( (${ir[$l.$what.$N2]} - ${ir[$l.$what.$N1]}) / (N2 - N1) ))
    ir[$l.$what]=$per
  done
  claim=${ir[$l.claim]}; cycle=${ir[$l.cycle]}; replay=$(( ${ir[$l.replay]} - cycle ))
  echo "$l instructions per call: claim=$claim complete=$((cycle - claim)) cycle=$cycle replay=$replay"
done
