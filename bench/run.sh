#!/usr/bin/env bash
# Re-runs every idem benchmark and rewrites the results section of BENCHMARKS.md.
#
#   bench/run.sh                # everything, about 9 minutes on 2 cores
#   QUICK=1 bench/run.sh        # a smoke test: same scenarios, much shorter runs
#   ONLY=stores bench/run.sh    # fresh and replay over HTTP on memory, PostgreSQL and Redis only,
#                               # in one run (about 2 minutes); writes bench/results/stores.md
#                               # and leaves BENCHMARKS.md alone
#
# Builds in release, starts PostgreSQL if it is down and a Redis server of its own (port 18090),
# runs the criterion benches with a short measurement time, then the HTTP scenarios over
# 127.0.0.1 (servers on ports 18080-18087), and prints the tables (also written to
# bench/results/latest.md). All traffic stays on loopback; every load run is bounded by a
# duration and a request count, and every server by --max-seconds.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=bench/results
mkdir -p "$OUT"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps 2>/dev/null | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
BIN=$TARGET_DIR/release

if [[ ${QUICK:-0} == 1 ]]; then
  WARM=0.3 DUR=1 SWEEP_DUR=0.7 CRIT=(--warm-up-time 0.2 --measurement-time 0.3) RT_N=200
else
  WARM=1 DUR=4 SWEEP_DUR=2.5 CRIT=(--warm-up-time 1 --measurement-time 2) RT_N=1000
fi
PG_URL=${IDEM_BENCH_PG:-postgres://postgres@127.0.0.1:5432/idem_bench}
REDIS_PORT=18090
ONLY=${ONLY:-all}
case $ONLY in all | stores) ;; *) echo "ONLY must be all or stores" >&2; exit 2 ;; esac
full() { [[ $ONLY == all ]]; }
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

# --- the machine ---------------------------------------------------------------------------------
{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') by \`bench/run.sh\`$([[ ${QUICK:-0} == 1 ]] && echo ' (QUICK=1: smoke test, numbers not meaningful)')."
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; memory $(free -g | awk '/^Mem:/{print $2}') GiB"
  echo "- $(rustc --version); $(psql --version 2>/dev/null | head -1); $(redis-server --version | cut -d' ' -f1-3)"
  echo "- commit $(git rev-parse --short HEAD); $(git status --porcelain -- idem-runtime idem-macros | wc -l) files of idem-runtime/idem-macros differ from it in the working tree measured"
  echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/env.txt"

# --- build ---------------------------------------------------------------------------------------
cargo build --release -p idem-bench --bins
if full; then cargo bench -p idem-bench --no-run; fi

# --- PostgreSQL ----------------------------------------------------------------------------------
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
psql -q -h 127.0.0.1 -U postgres -d postgres -c 'DROP DATABASE IF EXISTS idem_bench' \
  -c 'CREATE DATABASE idem_bench'

# --- Redis: a server of the benchmark's own, empty, no persistence, default policy --------------
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$(mktemp -d)" > "$OUT/redis.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  redis-cli -p "$REDIS_PORT" ping > /dev/null 2>&1 && break
  sleep 0.1
done
REDIS_PIDS=("${PIDS[@]}")

# --- in process: criterion -----------------------------------------------------------------------
if full; then
  cargo bench -p idem-bench --bench fingerprint -- "${CRIT[@]}"
  cargo bench -p idem-bench --bench overhead -- "${CRIT[@]}"
fi

# --- over HTTP -----------------------------------------------------------------------------------
: > "$OUT/load.jsonl"

# start_server PORT ARGS...: starts a server and waits until it listens.
start_server() {
  local port=$1
  shift
  "$BIN/idem-bench-server" --bind "127.0.0.1:$port" --max-seconds 900 "$@" \
    >> "$OUT/server-$port.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server on $port did not start: $(tail -3 "$OUT/server-$port.log")" >&2
  return 1
}

# Stops the idem servers started since the last call; the benchmark's Redis keeps running.
stop_servers() {
  local pid
  for pid in "${PIDS[@]}"; do
    [[ " ${REDIS_PIDS[*]} " == *" $pid "* ]] && continue
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=("${REDIS_PIDS[@]}")
}

# load LABEL ARGS...: one load run, its JSON line appended to load.jsonl.
load() {
  local label=$1
  shift
  "$BIN/idem-bench-load" --label "$label" --warmup "$WARM" --duration "$DUR" "$@" >> "$OUT/load.jsonl"
}

url() { echo "http://127.0.0.1:$1/$2"; }

# scenario GROUP NAME KEYS ROUTE PORT...: the bare handler, then NAME on ROUTE, each over all
# PORTs. The bare run right before it is NAME's baseline (label NAME:bare), so a change in the
# machine's load between scenarios does not skew the ratio.
scenario() {
  local group=$1 name=$2 keys=$3 route=$4
  shift 4
  local bare=() it=()
  for port in "$@"; do
    bare+=(--url "$(url "$port" bare)")
    it+=(--url "$(url "$port" "$route")")
  done
  load "$group/$name:bare" "${bare[@]}" --keys fresh
  load "$group/$name" "${it[@]}" --keys "$keys"
}

# idem fresh and replay on a store.
store_group() {
  local group=$1
  shift
  scenario "$group" idem-fresh fresh idem "$@"
  scenario "$group" idem-replay fixed idem "$@"
}

# Memory store, and the peer on the same server.
start_server 18080 --store memory
store_group memory 18080
if full; then
  scenario memory peer-fresh fresh peer 18080
  scenario memory peer-replay fixed peer 18080

  # Distinct keys in parallel, memory store.
  for c in 1 4 16 64; do
    DUR=$SWEEP_DUR load "sweep-memory/c$c/bare" --url "$(url 18080 bare)" --connections "$c"
    DUR=$SWEEP_DUR load "sweep-memory/c$c/idem-fresh" --url "$(url 18080 idem)" --connections "$c"
  done
fi
stop_servers

# SQLite (a new file each run).
if full; then
  SQLITE_DB=$(mktemp -d)/idem-bench.db
  start_server 18081 --store sqlite --database-url "sqlite://$SQLITE_DB"
  store_group sqlite 18081
  stop_servers
fi

# PostgreSQL, one instance, the pool exactly as `PostgresStore::connect` builds it.
start_server 18082 --store postgres --database-url "$PG_URL"
store_group postgres 18082
if full; then
  for c in 1 4 16 64; do
    DUR=$SWEEP_DUR load "sweep-postgres/c$c/bare" --url "$(url 18082 bare)" --connections "$c"
    DUR=$SWEEP_DUR load "sweep-postgres/c$c/idem-fresh" --url "$(url 18082 idem)" --connections "$c"
  done
fi
stop_servers

# Redis, one instance, on the benchmark's own server, as `RedisStore::connect` builds it.
start_server 18087 --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT"
store_group redis 18087
if full; then
  for c in 1 4 16 64; do
    DUR=$SWEEP_DUR load "sweep-redis/c$c/bare" --url "$(url 18087 bare)" --connections "$c"
    DUR=$SWEEP_DUR load "sweep-redis/c$c/idem-fresh" --url "$(url 18087 idem)" --connections "$c"
  done
fi
stop_servers

if ! full; then
  echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"
  "$BIN/idem-bench-report" --criterion /nonexistent --load "$OUT/load.jsonl" \
    --env "$OUT/env.txt" > "$OUT/stores.md"
  cat "$OUT/stores.md"
  exit 0
fi

# PostgreSQL, two instances on the same database, connections split between them.
start_server 18083 --store postgres --database-url "$PG_URL"
start_server 18084 --store postgres --database-url "$PG_URL"
store_group postgres-2x 18083 18084
stop_servers

# PostgreSQL with the pool's per-acquire ping off (test_before_acquire(false)).
start_server 18085 --store postgres --database-url "$PG_URL" --pg-no-ping
store_group postgres-noping 18085
stop_servers

# Round trips per request, counted on the wire, one connection, after a warm-up.
for pool in default noping; do
  extra=()
  [[ $pool == noping ]] && extra=(--pg-no-ping)
  start_server 18086 --store postgres --database-url "$PG_URL" --count-round-trips "${extra[@]}"
  "$BIN/idem-bench-load" --url "$(url 18086 idem)" --connections 1 --warmup 0 --duration 5 \
    --requests 200 --label warmup > /dev/null
  for keys in fresh fixed; do
    scenario=$([[ $keys == fresh ]] && echo idem-fresh || echo idem-replay)
    "$BIN/idem-bench-load" --label "rt-$pool/$scenario" --url "$(url 18086 idem)" --keys "$keys" \
      --connections 1 --warmup 0 --duration 30 --requests "$RT_N" \
      --pg-stats "$(url 18086 stats/pg)" >> "$OUT/load.jsonl"
  done
  stop_servers
done

echo "- load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/env.txt"

# --- report --------------------------------------------------------------------------------------
"$BIN/idem-bench-report" --criterion "$TARGET_DIR/criterion" --load "$OUT/load.jsonl" \
  --env "$OUT/env.txt" > "$OUT/latest.md"
if [[ ${QUICK:-0} != 1 ]]; then
  # Replace everything between the markers in BENCHMARKS.md with the new tables.
  awk -v report="$OUT/latest.md" '
    /<!-- results:begin -->/ { print; while ((getline line < report) > 0) print line; skip = 1; next }
    /<!-- results:end -->/ { skip = 0 }
    !skip { print }
  ' BENCHMARKS.md > BENCHMARKS.md.new && mv BENCHMARKS.md.new BENCHMARKS.md
fi
cat "$OUT/latest.md"
