#!/usr/bin/env bash
# #54: where PostgreSQL's CPU goes in the tokio-postgres handlers' statements. Replays them with
# pgbench, prepared (`-M prepared`: Parse once per session, then Bind/Execute, as tokio-postgres
# with deadpool's statement cache sends them), on the tables the bench and the store's migrations
# create (tpg_setup.sql), in a database of its own (`pgb_tpg`, or DB=...), 8 clients, the scripts
# alternating round by round. For each: transactions a second and, over a window that starts 1 s
# after the clients connect and ends 0.5 s before they stop, the CPU of the script's own
# backends (/proc/<pid>/stat, utime + stime) and of every postgres process (background writers
# and exited backends included) per transaction, and the backends' context switches per
# transaction (a backend that waits for its client's next message sleeps and wakes once per wait).
#
#   bench/pgbench/tpg.sh                                   # every tpg_ script, 3 rounds of 5 s
#   ROUNDS=2 SECS=4 bench/pgbench/tpg.sh tpg_hand.sql tpg_atomic.sql
#   PERF=tpg_atomic.sql PERF_OUT=/tmp/p bench/pgbench/tpg.sh   # perf profile of one script's
#       backends: /tmp/p.tpg_atomic.data, and the share of each frame (its callees included) in
#       /tmp/p.tpg_atomic.txt
#
# Scripts (tpg_hand.sql is the baseline every ratio is to):
# - tpg_hand: the hand-written handler: BEGIN, the key's INSERT .. ON CONFLICT DO NOTHING, the
#   order's INSERT, the response's UPDATE, COMMIT, each its own wait; 64-byte response.
# - tpg_hand_pipelined: the same five, pipelined as TokioPostgresTx pipelines: three waits.
# - tpg_atomic: one-commit atomic mode as TokioPostgresTx sends it: BEGIN with the claim's PL/pgSQL
#   call, the INSERT, the completion's call with COMMIT; the record's response 145 bytes (what the
#   bench's records hold). Three waits.
# - tpg_atomic_seq: tpg_atomic with each statement its own wait (five).
# - tpg_atomic_noidx: (a) on a records table without its expires_at and in-flight indexes.
# - tpg_atomic_sql: (b) the claim and completion as plain prepared statements, not PL/pgSQL calls.
# - tpg_atomic_nolock: (c) the claim without its advisory lock.
# - tpg_atomic_noset: the claim without its three set_config calls (lock wait, timeouts).
# - tpg_atomic_w64: (d) a 64-byte response in the record.
# - tpg_atomic_nocheck: on a records table without its four CHECK constraints.
# - tpg_atomic_domain: on a records table whose per-column checks are domains, one CHECK left.
# - tpg_atomic_lean: tpg_atomic_sql on a records table with no CHECK and only its primary key.
# - tpg_atomic_shipped: what the store sends since migration 5: the claim's call, the record's
#   prepared INSERT, on the table without CHECKs.
# - tpg_atomic_shipped_sql: tpg_atomic_shipped with the claim as two plain prepared statements.
set -euo pipefail
cd "$(dirname "$0")"
DB=${DB:-pgb_tpg}
PG="-h 127.0.0.1 -U postgres"
SECS=${SECS:-5}
# Under perf the clients run 3 s longer: perf takes a while to attach, and the window must end before they do.
LONGER=0
[[ -z ${PERF:-} ]] || LONGER=3
psql -q $PG -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
psql -q -v ON_ERROR_STOP=1 $PG -d "$DB" -f tpg_setup.sql > /dev/null 2>&1
hexof() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
PL="\\x$(hexof 145)" RESP="\\x$(hexof 64)"
TCK=$(getconf CLK_TCK)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# CPU ticks of the given pids (utime + stime), and of every postgres process with its reaped children.
ticks() { local t=0 f p; for p in "$@"; do read -r -a f 2>/dev/null < "/proc/$p/stat" && t=$((t + f[13] + f[14])); done; echo "$t"; }
kticks() { local t=0 f p; for p in "$@"; do read -r -a f 2>/dev/null < "/proc/$p/stat" && t=$((t + f[14])); done; echo "$t"; }
allpg() { local t=0 f p; for p in $(pgrep -x postgres); do read -r -a f 2>/dev/null < "/proc/$p/stat" && t=$((t + f[13] + f[14] + f[15] + f[16])); done; echo "$t"; }
switches() { local t=0 p; for p in "$@"; do t=$((t + $(awk '/ctxt_switches/ {s += $2} END {print s + 0}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo "$t"; }
run=0
one() {
  local script=$1 pids t0 t1 b0 b1 k0 k1 a0 a1 s0 s1 tx
  run=$((run + 1))
  rm -f "$TMP"/log*
  pgbench $PG -n -M prepared -c 8 -j 1 -T "$((SECS + LONGER))" -l --log-prefix="$TMP/log" \
    -D pl="$PL" -D resp="$RESP" -D n=0 -D base=$((run * 10000000000)) \
    -D exp0=$(($(date +%s%3N) + 86400000)) -f "$script" "$DB" > "$TMP/out" 2>&1 &
  local pgb=$!
  sleep 1
  pids=$(psql -At $PG -d postgres -c "SELECT pid FROM pg_stat_activity WHERE datname = '$DB' AND backend_type = 'client backend'")
  t0=$(date +%s.%N) b0=$(ticks $pids) k0=$(kticks $pids) a0=$(allpg) s0=$(switches $pids)
  if [[ -n ${PERF:-} ]]; then
    perf record -q -e cpu-clock -F 1999 -g -o "$TMP/perf.data" -p "$(tr '\n' ',' <<< "$pids" | sed 's/,$//')" -- sleep "$(bc <<< "$SECS - 1.5")" 2> /dev/null
  else
    sleep "$(bc <<< "$SECS - 1.5")"
  fi
  t1=$(date +%s.%N) b1=$(ticks $pids) k1=$(kticks $pids) a1=$(allpg) s1=$(switches $pids)
  wait "$pgb" || { cat "$TMP/out" >&2; return 1; }
  tx=$(cat "$TMP"/log* | awk -v t0="$t0" -v t1="$t1" '{ t = $5 + $6 / 1e6; if (t >= t0 && t < t1) n++ } END { print n + 0 }')
  awk -v s="$script" -v tx="$tx" -v t0="$t0" -v t1="$t1" -v b="$((b1 - b0))" -v k="$((k1 - k0))" -v a="$((a1 - a0))" -v sw="$((s1 - s0))" -v tck="$TCK" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
    'BEGIN { printf "%-24s %7.0f tx/s  backends %5.1f µs/tx (kernel %5.1f)  all postgres %5.1f µs/tx  switches %4.2f/tx  load %s\n", s, tx / (t1 - t0), b * 1e6 / tck / tx, k * 1e6 / tck / tx, a * 1e6 / tck / tx, sw / tx, l }'
  if [[ -n ${PERF:-} ]]; then
    local out=${PERF_OUT:-/tmp/tpg-perf}.$(basename "$script" .sql)
    cp "$TMP/perf.data" "$out.data"
    perf report -i "$out.data" --children --sort symbol --stdio -g none --percent-limit 0.2 2> /dev/null |
      grep -v '^#' | grep -v '^$' > "$out.txt" || true
  fi
}
scripts=("$@")
[[ ${#scripts[@]} -gt 0 ]] || scripts=(tpg_hand.sql tpg_atomic.sql tpg_hand_pipelined.sql tpg_atomic_seq.sql tpg_atomic_noidx.sql tpg_atomic_sql.sql tpg_atomic_nolock.sql tpg_atomic_noset.sql tpg_atomic_w64.sql tpg_atomic_nocheck.sql tpg_atomic_domain.sql tpg_atomic_lean.sql tpg_atomic_shipped.sql tpg_atomic_shipped_sql.sql)
[[ -z ${PERF:-} ]] || scripts=("$PERF")
for round in $(seq "${ROUNDS:-3}"); do for s in "${scripts[@]}"; do one "$s"; done; done
