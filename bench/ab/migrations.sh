#!/usr/bin/env bash
# Same-server A/B of the cycle (claim + complete, bench/scripts/cycle.sql) between engine
# builds: each argument is a directory of migrations (sql/migrations of a checkout, or a
# modified copy). One throwaway cluster, one database per build, alternating rounds so a slow
# phase of a shared machine hits every build alike.
#
#   bench/ab/migrations.sh <label>=<migrations dir> <label>=<migrations dir> ...
#   bench/ab/migrations.sh stripe=sql/migrations@bench/scripts/stripe.sql engine=sql/migrations
#                       # <dir>@<script>: this build runs its own pgbench script (tps and WAL runs;
#                       # bench/sql/baselines.sql is in every database, so the Stripe pattern and
#                       # the other baselines measure alongside the builds, in the same rounds)
#   bench/ab/migrations.sh empty=sql/migrations full=sql/migrations+10000000
#                       # <dir>+<rows>: this build's database first holds that many operations
#                       # (the scale scenario's rows, bench/lib/scale-rows.ts); after @<script>
#   ROUNDS=3 SECONDS_PER_RUN=20 CLIENTS="8 32" SCRIPT=bench/scripts/cycle.sql bench/ab/migrations.sh ...
#   CPU_LOOP=1 ROUNDS=7 bench/ab/migrations.sh ...   # server CPU instead: bench/sql/cycle-cpu-loop.sql
#   CPU_NS=1 ROUNDS=5 bench/ab/migrations.sh ...     # the same loop, CPU from schedstat (bench/ab/cpu-loop.ts)
#   DRAIN=1 bench/ab/migrations.sh ... feed=sql/migrations   # then the feed's drain rate on the
#                                                            # last build (bench/ab/feed-drain.ts)
#   CPU_CALL=1 ROUNDS=7 CYCLES=1000 bench/ab/migrations.sh ...   # server CPU per call: bench/ab/cpu-call.ts
#   CPU_SPLIT=1 ROUNDS=7 CYCLES=300 bench/ab/migrations.sh ...   # the same for claim, complete and
#                                                                # replay apart: bench/ab/cpu-split.ts
#   WAL=1 CYCLES=300 bench/ab/migrations.sh ...  # WAL per cycle by record and relation (pg_waldump);
#                                                # SCRIPT=bench/scripts/stripe.sql: the Stripe pattern's
#
# Prints one line per run (label, clients, round, tps) and the median tps per build and client
# count; with CPU_LOOP=1 the milliseconds of 3000 claim + complete pairs in one backend (no
# commits, no client) and the minimum per build (the least disturbed run on a shared machine).
# Needs the Debian PostgreSQL 15 binaries (/usr/lib/postgresql/15/bin) and runs the server as
# user postgres when started as root.
set -euo pipefail
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
CLIENTS=${CLIENTS:-8}
SCRIPT=$(realpath "${SCRIPT:-bench/scripts/cycle.sql}")
PORT=${PORT:-$((20000 + RANDOM % 20000))}
EXTRA=""
if [ "${WAL:-0}" = 1 ]; then EXTRA="-c autovacuum=off"; fi
DIR=$(mktemp -d /tmp/settle-ab.XXXXXX)
chmod 755 "$DIR"
RUN=()
if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; RUN=(runuser -u postgres --); fi
"${RUN[@]}" "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-sync >/dev/null
"${RUN[@]}" "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w \
  -o "-p $PORT -k $DIR -c listen_addresses='' -c shared_buffers=256MB -c max_connections=100 $EXTRA" start >/dev/null
trap '"${RUN[@]}" "$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
PSQL=(psql -X -q -h "$DIR" -p "$PORT" -U postgres -v ON_ERROR_STOP=1)

labels=()
declare -A scripts
for spec in "$@"; do
  label=${spec%%=*}; migrations=${spec#*=}
  scripts[$label]=$SCRIPT
  rows=0
  if [[ $migrations =~ ^(.+)\+([0-9]+)$ ]]; then migrations=${BASH_REMATCH[1]}; rows=${BASH_REMATCH[2]}; fi
  if [[ $migrations == *@* ]]; then scripts[$label]=$(realpath "${migrations#*@}"); migrations=${migrations%%@*}; fi
  labels+=("$label")
  "${PSQL[@]}" -d postgres -c "create database ab_$label"
  for f in "$migrations"/*.sql; do
    (echo 'begin;'; cat "$f"; echo 'commit;') | "${PSQL[@]}" -d "ab_$label" >/dev/null
  done
  "${PSQL[@]}" -d "ab_$label" -f "$(dirname "$0")/../sql/baselines.sql" >/dev/null
  if [ "$rows" -gt 0 ]; then
    # the scale scenario's pre-existing operations (bench/lib/scale-rows.ts), then a checkpoint
    SCALE_URL="postgresql://postgres@/ab_$label?host=$DIR&port=$PORT" SCALE_ROWS=$rows \
      SCALE_LIB=$(realpath "$(dirname "$0")/../lib/scale-rows.ts") npx tsx -e \
      'import(process.env.SCALE_LIB).then((m) => m.generateScaleRows(process.env.SCALE_URL, { rows: Number(process.env.SCALE_ROWS), log: console.log }))'
  fi
done

declare -A results
if [ "${WAL:-0}" = 1 ]; then
  # One pgbench client: a checkpoint, 100 unmeasured cycles (the full-page images after the
  # checkpoint), then $CYCLES measured cycles; per cycle, every WAL record between the two
  # positions by type and relation, with the full-page images among them (bench/sql/baselines.sql
  # is applied too, so SCRIPT=bench/scripts/stripe.sql measures the Stripe pattern).
  cycles=${CYCLES:-300}
  for label in "${labels[@]}"; do
    db="ab_$label"
    "${PSQL[@]}" -d "$db" -c 'checkpoint' >/dev/null
    "$BIN/pgbench" -h "$DIR" -p "$PORT" -U postgres -n -M prepared -c 1 -t 100 -f "${scripts[$label]}" "$db" >/dev/null 2>&1
    start=$("${PSQL[@]}" -At -d "$db" -c 'select pg_current_wal_insert_lsn()')
    "$BIN/pgbench" -h "$DIR" -p "$PORT" -U postgres -n -M prepared -c 1 -t "$cycles" -f "${scripts[$label]}" "$db" >/dev/null
    end=$("${PSQL[@]}" -At -d "$db" -c 'select pg_current_wal_insert_lsn()')
    names=$("${PSQL[@]}" -At -F ' ' -d "$db" -c 'select pg_relation_filenode(oid), relname from pg_class where pg_relation_filenode(oid) is not null')
    echo "== $label: WAL per cycle, $("${PSQL[@]}" -At -d "$db" -c "select round(pg_wal_lsn_diff('$end', '$start') / $cycles)") B"
    "$BIN/pg_waldump" -p "$DIR/data/pg_wal" -s "$start" -e "$end" 2>/dev/null |
      awk -v n="$cycles" -v names="$names" '
        BEGIN { split(names, a, "\n"); for (i in a) { split(a[i], f, " "); rel[f[1]] = f[2] } }
        {
          rm = $2; tot = $6; sub(",", "", tot); desc = $0; sub(/.*desc: /, "", desc); split(desc, d, " ")
          r = "-"; if (match($0, /rel [0-9]+\/[0-9]+\/[0-9]+/)) { split(substr($0, RSTART + 4, RLENGTH - 4), p, "/"); r = (p[3] in rel) ? rel[p[3]] : p[3] }
          k = sprintf("%-6s %-14s %s", rm, d[1], r); c[k]++; b[k] += tot; if ($0 ~ /FPW/) fpi[k]++
        }
        END {
          for (k in c) if (b[k] / n >= 0.5)
            printf "%7.1f B %5.2f records  %s%s\n", b[k] / n, c[k] / n, k, (k in fpi) ? sprintf("  (FPI %.2f)", fpi[k] / n) : ""
        }' | sort -n -r
  done
  exit 0
fi
if [ "${CPU_CALL:-0}" = 1 ]; then
  # Each call its own transaction (PL/pgSQL's per-transaction set-up counted), backend CPU
  # from /proc/<pid>/schedstat, builds alternating; prints the minimum and median per build.
  urls=()
  for label in "${labels[@]}"; do urls+=("$label=postgres://postgres@localhost/ab_$label?host=$DIR&port=$PORT"); done
  npx tsx "$(dirname "$0")/cpu-call.ts" "$ROUNDS" "${CYCLES:-1000}" "${urls[@]}"
  exit 0
fi
if [ "${CPU_SPLIT:-0}" = 1 ]; then
  urls=()
  for label in "${labels[@]}"; do urls+=("$label=postgres://postgres@localhost/ab_$label?host=$DIR&port=$PORT"); done
  npx tsx "$(dirname "$0")/cpu-split.ts" "$ROUNDS" "${CYCLES:-300}" "${urls[@]}"
  exit 0
fi
if [ "${CPU_NS:-0}" = 1 ]; then
  # Server CPU from the backends' schedstat (bench/ab/cpu-loop.ts): immune to a loaded machine's wall clock.
  specs=()
  for label in "${labels[@]}"; do specs+=("$label=postgresql://postgres@/ab_$label?host=$DIR&port=$PORT"); done
  npx tsx bench/ab/cpu-loop.ts "$ROUNDS" "${specs[@]}"
  exit 0
fi
if [ "${CPU_LOOP:-0}" = 1 ]; then
  LOOP=$(realpath bench/sql/cycle-cpu-loop.sql)
  for round in $(seq 1 "$ROUNDS"); do
    for label in "${labels[@]}"; do
      ms=$("${PSQL[@]}" -d "ab_$label" -f "$LOOP" 2>&1 | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1)
      echo "$label round=$round ms=$ms"
      results[$label]="${results[$label]:-} $ms"
    done
  done
  for label in "${labels[@]}"; do
    min=$(tr ' ' '\n' <<<"${results[$label]}" | grep -v '^$' | sort -n | head -1)
    echo "min $label ms=$min us_per_cycle=$(awk "BEGIN {printf \"%.1f\", $min * 1000 / 3000}") (runs:${results[$label]})"
  done
  exit 0
fi
# CLIENTS may be a list ("8 32"): each count in turn, on the same databases.
for clients in $CLIENTS; do
  declare -A results=()
  for round in $(seq 1 "$ROUNDS"); do
    for label in "${labels[@]}"; do
      "${PSQL[@]}" -d "ab_$label" -c 'checkpoint' >/dev/null
      # warm-up (unmeasured), then the measured run
      "$BIN/pgbench" -h "$DIR" -p "$PORT" -U postgres -n -M prepared -c "$clients" -j 2 -T 3 -f "${scripts[$label]}" "ab_$label" >/dev/null 2>&1
      out=$("$BIN/pgbench" -h "$DIR" -p "$PORT" -U postgres -n -M prepared -c "$clients" -j 2 -T "$SECONDS_PER_RUN" -f "${scripts[$label]}" "ab_$label" 2>&1)
      tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
      failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
      echo "$label clients=$clients round=$round tps=$tps failed=${failed:-0}"
      results[$label]="${results[$label]:-} $tps"
    done
  done
  for label in "${labels[@]}"; do
    median=$(tr ' ' '\n' <<<"${results[$label]}" | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "median $label clients=$clients tps=$median (runs:${results[$label]})"
  done
done
if [ "${DRAIN:-0}" = 1 ]; then
  npx tsx bench/ab/feed-drain.ts "postgresql://postgres@/ab_${labels[-1]}?host=$DIR&port=$PORT" "${DRAIN_RUNS:-5}" "${DRAIN_BATCHES:-100,500,1000}"
fi
