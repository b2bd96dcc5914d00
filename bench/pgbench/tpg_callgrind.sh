#!/usr/bin/env bash
# #54: PostgreSQL's instructions per transaction for each tpg_ script, which the machine's load does
# not move (CPU time does). Needs a PostgreSQL server of its own running under callgrind, every
# process traced (start it as below); each pgbench run is one backend, whose counts callgrind writes
# when it exits. Each script runs twice on one client (-M prepared), N1 and N2 transactions; the
# difference divided by N2 - N1 is one transaction's instructions, the session's set-up and the
# first plans and caches cancelled. Prints the total and the inclusive count of the frames that
# tell the statements apart.
#
#   su postgres -c "valgrind --tool=callgrind --trace-children=yes \
#     --callgrind-out-file=/tmp/cg54/cg.%p /usr/lib/postgresql/15/bin/postgres -D DATA -p 5499 \
#     -c listen_addresses=127.0.0.1 -c shared_buffers=128MB -c autovacuum=off" &
#   CG_DIR=/tmp/cg54 PORT=5499 bench/pgbench/tpg_callgrind.sh [scripts...]
set -euo pipefail
cd "$(dirname "$0")"
PORT=${PORT:-5499} CG_DIR=${CG_DIR:-/tmp/cg54} N1=${N1:-100} N2=${N2:-300}
PG="-h 127.0.0.1 -p $PORT -U postgres"
psql -q $PG -d postgres -c "DROP DATABASE IF EXISTS pgb_tpg" -c "CREATE DATABASE pgb_tpg"
psql -q -v ON_ERROR_STOP=1 $PG -d pgb_tpg -f tpg_setup.sql > /dev/null 2>&1
hexof() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
PL="\\x$(hexof 145)" RESP="\\x$(hexof 64)"
# The frames reported, inclusive (what each spends with its callees).
FRAMES='PostgresMain|index_getnext_slot|LockAcquireExtended|_bt_doinsert|ExecPrepareExpr|AtEOXact_GUC|XLogFlush|PortalRun|CommitTransactionCommand|StartTransactionCommand|plpgsql_call_handler|pg_advisory_xact_lock|set_config_by_name|ExecConstraints|ExecInsertIndexTuples|heap_insert|heap_update|ExecInitNode|standard_ExecutorStart|standard_ExecutorEnd|GetCachedPlan|pq_getmessage|pq_getbyte|socket_flush|XLogInsert|stringToNode'
run=0
session() { # script transactions -> the new callgrind file
  run=$((run + 1))
  local before after
  sleep 1 # earlier sessions' files written first
  before=$(ls "$CG_DIR")
  pgbench $PG -n -M prepared -c 1 -t "$2" -D pl="$PL" -D resp="$RESP" -D n=0 \
    -D base=$((run * 10000000000)) -D exp0=$(($(date +%s%3N) + 86400000)) -f "$1" pgb_tpg > /dev/null
  for _ in $(seq 100); do
    after=$(comm -13 <(echo "$before") <(ls "$CG_DIR"))
    [[ -n $after ]] && break
    sleep 0.2
  done
  sleep 0.5
  # The largest new file: the pgbench session's backend.
  (cd "$CG_DIR" && ls -S $(comm -13 <(echo "$before") <(ls "$CG_DIR")) | head -1 | sed "s|^|$CG_DIR/|")
}
frames() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2> /dev/null |
  awk -v re="^($FRAMES)\$" '/%\)  / { n = $1; gsub(",", "", n); f = $0; sub(/.*%\)  /, "", f); sub(/ \[.*/, "", f); sub(/.*:/, "", f)
    if (f ~ re && !(f in s)) s[f] = n } END { for (f in s) print f, s[f] }'; }
total() { sed -n 's/^summary: *//p; s/^totals: *//p' "$1" | head -1; }
scripts=("$@")
[[ ${#scripts[@]} -gt 0 ]] || scripts=(tpg_hand.sql tpg_atomic.sql tpg_hand_pipelined.sql tpg_atomic_seq.sql tpg_atomic_noidx.sql tpg_atomic_sql.sql tpg_atomic_nolock.sql tpg_atomic_noset.sql tpg_atomic_w64.sql tpg_atomic_nocheck.sql tpg_atomic_domain.sql tpg_atomic_lean.sql tpg_atomic_shipped.sql tpg_atomic_shipped_sql.sql)
for s in "${scripts[@]}"; do
  a=$(session "$s" "$N1") b=$(session "$s" "$N2")
  printf '%-24s %8.0f instructions / transaction' "$s" "$(bc <<< "($(total "$b") - $(total "$a")) / ($N2 - $N1)")"
  join <(frames "$a" | sort) <(frames "$b" | sort) | awk -v d=$((N2 - N1)) '{ printf "  %s %.0f", $1, ($3 - $2) / d }'
  echo
done
