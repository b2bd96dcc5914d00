#!/usr/bin/env bash
# Re-runs every idem benchmark and rewrites the results section of BENCHMARKS.md.
#
#   bench/run.sh                  # everything, about 13 minutes on 2 cores (12 min 43 s measured)
#   QUICK=1 bench/run.sh          # a smoke test: same scenarios, much shorter runs, no rewrite
#   ONLY=memory,flat bench/run.sh # some sections only; writes bench/results/only.md and
#                                 # leaves BENCHMARKS.md alone
#   ALLOCATOR=mimalloc ONLY=memory bench/run.sh   # the server on mimalloc instead of glibc's
#
# Sections (ONLY= takes a comma-separated list of them; `all` is the default):
#   criterion       in process: the overhead and fingerprint criterion benches
#   memory          memory store: idem fresh and replay, axum-idempotent (peer), concurrency sweep
#   sqlite          SQLite store: idem fresh and replay
#   postgres        PostgreSQL store: idem fresh and replay (no-op handler), concurrency sweep
#   mysql           MySQL store (MariaDB): idem fresh and replay (no-op handler)
#   postgres-write  PostgreSQL, a handler doing one INSERT: bare, hand-written exactly-once, plain
#                   mode, atomic mode (against bare and against hand-written), replay; on sqlx,
#                   then on tokio-postgres (tpg) and diesel-async against their own bare and
#                   hand-written handlers
#   redis           Redis store: idem fresh and replay, against the bare handler and against
#                   the bare handler that reads one Redis key first (/redis/bare)
#   flat-memory, flat-sqlite, flat-postgres, flat-redis (or `flat` for all four)
#                   fresh and replay on an empty store, then with 1,000,000 records preloaded
#   round-trips     PostgreSQL round trips per request, counted on the wire
#   far-postgres    PostgreSQL 0.5 ms away in each direction: latency added per request, in
#                   round trips, for bare, hand-written, plain and atomic (one connection), on
#                   sqlx, tokio-postgres and diesel-async
#   stores          memory, postgres, mysql and redis (the store comparison)
#
# Builds in release, starts PostgreSQL (and, for mysql, MariaDB) if it is down and a Redis server
# of its own (port 18090),
# then runs the sections over 127.0.0.1 (servers on ports 18080-18089), and prints the tables
# (also written to bench/results/latest.md). Every load run records the machine's load average
# before and after it. All traffic stays on loopback; every load run is bounded by a duration
# and a request count, and every server by --max-seconds.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=bench/results
mkdir -p "$OUT"
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps 2>/dev/null | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
TARGET_DIR=${TARGET_DIR:-$ROOT/target}
BIN=$TARGET_DIR/release
STARTED=$SECONDS

if [[ ${QUICK:-0} == 1 ]]; then
  WARM=0.3 DUR=1 SWEEP_DUR=0.7 CRIT=(--warm-up-time 0.2 --measurement-time 0.3) RT_N=200
  PRELOAD=${PRELOAD:-100000}
else
  WARM=1 DUR=4 SWEEP_DUR=2.5 CRIT=(--warm-up-time 1 --measurement-time 2) RT_N=1000
  PRELOAD=${PRELOAD:-1000000}
fi
# Of the preloaded records, a tenth expire one after another over the next minute, so the
# sweeper (every second, batches of 1 000) has work while the load runs.
EXPIRING=$((PRELOAD / 10))
PG_URL=${IDEM_BENCH_PG:-postgres://postgres@127.0.0.1:5432/idem_bench}
MY_URL=${IDEM_BENCH_MYSQL:-mysql://root@127.0.0.1:3306/idem_bench}
REDIS_PORT=18090
# far-postgres: the delay added in each direction, µs.
FAR_US=${FAR_US:-500}
ONLY=${ONLY:-all}
ONLY=,${ONLY//stores/memory,postgres,mysql,redis},
ONLY=${ONLY//,flat,/,flat-memory,flat-sqlite,flat-postgres,flat-redis,}
want() { [[ $ONLY == ,all, || $ONLY == *",$1,"* ]]; }
for s in ${ONLY//,/ }; do
  case $s in
    all | criterion | memory | sqlite | postgres | mysql | postgres-write | redis | flat-memory | \
      flat-sqlite | flat-postgres | flat-redis | round-trips | far-postgres) ;;
    *) echo "ONLY: unknown section $s (see the top of bench/run.sh)" >&2; exit 2 ;;
  esac
done
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# --- the machine ---------------------------------------------------------------------------------
{
  echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') by \`$([[ $ONLY == ,all, ]] || echo "ONLY=${ONLY:1:-1} ")bench/run.sh\`$([[ ${QUICK:-0} == 1 ]] && echo ' (QUICK=1: smoke test, numbers not meaningful)')."
  echo
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; memory $(free -g | awk '/^Mem:/{print $2}') GiB"
  echo "- $(rustc --version); $(psql --version 2>/dev/null | head -1); $(redis-server --version | cut -d' ' -f1-3)"
  echo "- commit $(git rev-parse --short HEAD); $(git status --porcelain -- idem-runtime idem-macros | wc -l) files of idem-runtime/idem-macros differ from it in the working tree measured"
  echo "- load average (1, 5, 15 min) at start: $(loadavg)"
} > "$OUT/env.txt"

# --- build ---------------------------------------------------------------------------------------
# ALLOCATOR=mimalloc serves every HTTP section from a server built with mimalloc as its global
# allocator (the load generator keeps the system's).
cargo build --release -p idem-bench --bins ${ALLOCATOR:+--features "$ALLOCATOR"}
if want criterion; then cargo bench -p idem-bench --no-run; fi

# --- PostgreSQL ----------------------------------------------------------------------------------
# Only the sections that use it start PostgreSQL and recreate its database: a run of other
# sections leaves alone a database another run may be using.
if want postgres || want postgres-write || want flat-postgres || want round-trips || want far-postgres; then
  if ! pg_isready -q -h 127.0.0.1 -p 5432; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
    for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
  fi
  psql -q -h 127.0.0.1 -U postgres -d postgres -c 'DROP DATABASE IF EXISTS idem_bench' \
    -c 'CREATE DATABASE idem_bench'
fi
# Empties the benchmark database: the store's schema and the orders table.
pg_reset() {
  psql -q -h 127.0.0.1 -U postgres -d idem_bench -c 'DROP SCHEMA IF EXISTS idem CASCADE' \
    -c 'DROP TABLE IF EXISTS bench_orders' -c 'DROP TABLE IF EXISTS bench_keys' 2> /dev/null
}

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
if want criterion; then
  cargo bench -p idem-bench --bench fingerprint -- "${CRIT[@]}"
  cargo bench -p idem-bench --bench overhead -- "${CRIT[@]}"
fi

# --- over HTTP -----------------------------------------------------------------------------------
: > "$OUT/load.jsonl"

# start_server PORT ARGS...: starts a server and waits until it listens (preloading may take a
# minute or two first).
start_server() {
  local port=$1
  shift
  "$BIN/idem-bench-server" --bind "127.0.0.1:$port" --max-seconds 900 "$@" \
    >> "$OUT/server-$port.log" 2>&1 &
  local pid=$!
  PIDS+=($pid)
  for _ in $(seq 3000); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
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

# load LABEL ARGS...: one load run, its JSON line (load average before and after included)
# appended to load.jsonl.
load() {
  local label=$1
  shift
  "$BIN/idem-bench-load" --label "$label" --warmup "$WARM" --duration "$DUR" "$@" >> "$OUT/load.jsonl"
}

url() { echo "http://127.0.0.1:$1/$2"; }

# pair GROUP NAME KEYS BARE ROUTE PORT [LOAD ARGS...]: the bare handler on route BARE (label
# GROUP/NAME:bare), then NAME on ROUTE. The bare run right before it is NAME's baseline, so a
# change in the machine's load between scenarios does not skew the ratio.
pair() {
  local group=$1 name=$2 keys=$3 bare=$4 route=$5 port=$6
  shift 6
  load "$group/$name:bare" --url "$(url "$port" "$bare")" --keys fresh "$@"
  load "$group/$name" --url "$(url "$port" "$route")" --keys "$keys" "$@"
}

# idem fresh and replay on the server at PORT.
store_group() {
  local group=$1 port=$2
  pair "$group" idem-fresh fresh bare idem "$port"
  pair "$group" idem-replay fixed bare idem "$port"
}

# sweep STORE PORT: distinct keys at 1, 4, 16 and 64 connections.
sweep() {
  for c in 1 4 16 64; do
    DUR=$SWEEP_DUR load "sweep-$1/c$c/bare" --url "$(url "$2" bare)" --connections "$c"
    DUR=$SWEEP_DUR load "sweep-$1/c$c/idem-fresh" --url "$(url "$2" idem)" --connections "$c"
  done
}

if want memory; then
  start_server 18080 --store memory
  store_group memory 18080
  pair memory peer-fresh fresh bare peer 18080
  pair memory peer-replay fixed bare peer 18080
  [[ $ONLY == ,all, ]] && sweep memory 18080
  stop_servers
fi

if want sqlite; then
  start_server 18081 --store sqlite --database-url "sqlite://$(mktemp -d)/idem-bench.db"
  store_group sqlite 18081
  stop_servers
fi

# PostgreSQL, the pool exactly as `PostgresStore::connect` builds it.
if want postgres; then
  pg_reset
  start_server 18082 --store postgres --database-url "$PG_URL"
  store_group postgres 18082
  [[ $ONLY == ,all, ]] && sweep postgres 18082
  stop_servers
fi

# MySQL, the pool exactly as `MySqlStore::connect` builds it, in a database of the benchmark's
# own on the local MariaDB (started if it is down), emptied first.
if want mysql; then
  if ! mysqladmin --host=127.0.0.1 --port=3306 --user=root ping > /dev/null 2>&1; then
    service mariadb start > /dev/null
  fi
  mysql --host=127.0.0.1 --port=3306 --user=root \
    -e 'DROP DATABASE IF EXISTS idem_bench; CREATE DATABASE idem_bench'
  echo "- $(mysql --host=127.0.0.1 --user=root -N -e 'SELECT CONCAT("MariaDB/MySQL ", VERSION())')" >> "$OUT/env.txt"
  start_server 18093 --store mysql --database-url "$MY_URL"
  store_group mysql 18093
  stop_servers
fi

# The handler users compare with: one INSERT, one commit. 16 connections.
if want postgres-write; then
  pg_reset
  start_server 18083 --store postgres --database-url "$PG_URL"
  pair postgres-write hand-fresh fresh pg/bare pg/hand 18083 --connections 16
  pair postgres-write plain-fresh fresh pg/bare pg/plain 18083 --connections 16
  pair postgres-write atomic-fresh fresh pg/bare pg/atomic 18083 --connections 16
  # Atomic mode against the hand-written exactly-once handler, its baseline.
  pair postgres-write atomic-vs-hand fresh pg/hand pg/atomic 18083 --connections 16
  pair postgres-write atomic-two-fresh fresh pg/bare pg/atomic-two 18083 --connections 16
  pair postgres-write replay fixed pg/bare pg/plain 18083 --connections 16
  # The same four on tokio-postgres (tpg) and diesel-async (diesel), each against its own
  # driver's bare and hand-written handlers, and each driver's bare handler against sqlx's.
  for d in tpg diesel; do
    pair postgres-write "$d-bare-vs-sqlx" fresh pg/bare "$d/bare" 18083 --connections 16
    pair postgres-write "$d-hand-fresh" fresh "$d/bare" "$d/hand" 18083 --connections 16
    pair postgres-write "$d-plain-fresh" fresh "$d/bare" "$d/plain" 18083 --connections 16
    pair postgres-write "$d-atomic-fresh" fresh "$d/bare" "$d/atomic" 18083 --connections 16
    pair postgres-write "$d-atomic-vs-hand" fresh "$d/hand" "$d/atomic" 18083 --connections 16
  done
  stop_servers
fi

if want redis; then
  redis-cli -p "$REDIS_PORT" flushall > /dev/null
  start_server 18087 --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT"
  store_group redis 18087
  # Against a handler that waits on the same Redis once, without idem: what is idem's and what is
  # any Redis client's on this machine.
  pair redis idem-fresh-vs-read fresh redis/bare idem 18087
  pair redis idem-replay-vs-read fixed redis/bare idem 18087
  stop_servers
fi

# flat STORE PORT ARGS...: fresh and replay on an empty store, then on one holding PRELOAD
# records (EXPIRING of them expiring over the next minute), the sweeper running in both. Each is
# paired with the bare handler, on Redis with the one that reads a Redis key first, which the
# machine's state slows as it slows the store (BENCHMARKS.md, "What the results say").
flat() {
  local store=$1 port=$2
  shift 2
  local size bare=bare
  [[ $store == redis ]] && bare=redis/bare
  for size in empty 1m; do
    local extra=()
    [[ $size == 1m ]] && extra=(--preload "$PRELOAD" --preload-expiring "$EXPIRING")
    case $store in
      postgres) pg_reset ;;
      redis) redis-cli -p "$REDIS_PORT" flushall > /dev/null ;;
    esac
    local args=("$@")
    [[ $store == sqlite ]] && args=(--database-url "sqlite://$(mktemp -d)/idem-bench.db")
    start_server "$port" --store "$store" --sweep-ms 1000 "${args[@]}" "${extra[@]}"
    pair "flat-$store" "$size-fresh" fresh "$bare" idem "$port"
    pair "flat-$store" "$size-replay" fixed "$bare" idem "$port"
    stop_servers
  done
}
want flat-memory && { flat memory 18084 || echo "flat-memory failed" >&2; }
want flat-sqlite && { flat sqlite 18085 || echo "flat-sqlite failed" >&2; }
want flat-postgres && { flat postgres 18086 --database-url "$PG_URL" || echo "flat-postgres failed" >&2; }
want flat-redis && { flat redis 18088 --redis-url "redis://127.0.0.1:$REDIS_PORT" || echo "flat-redis failed" >&2; }

# Round trips per request, counted on the wire, one connection, after a warm-up.
if want round-trips; then
  pg_reset
  start_server 18089 --store postgres --database-url "$PG_URL" --count-round-trips
  DRIVER_ROUTES="tpg/bare tpg/hand tpg/plain tpg/atomic diesel/bare diesel/hand diesel/plain diesel/atomic"
  for route in idem pg/bare pg/hand pg/plain pg/atomic $DRIVER_ROUTES; do
    "$BIN/idem-bench-load" --url "$(url 18089 "$route")" --connections 1 --warmup 0 \
      --duration 5 --requests 200 --label warmup > /dev/null
  done
  DRIVER_CASES=()
  for route in $DRIVER_ROUTES; do DRIVER_CASES+=("write-${route//\//-}:$route:fresh"); done
  for case in idem-fresh:idem:fresh idem-replay:idem:fixed write-bare:pg/bare:fresh \
    write-hand:pg/hand:fresh write-plain:pg/plain:fresh write-atomic:pg/atomic:fresh write-replay:pg/plain:fixed \
    "${DRIVER_CASES[@]}"; do
    IFS=: read -r name route keys <<< "$case"
    "$BIN/idem-bench-load" --label "rt/$name" --url "$(url 18089 "$route")" --keys "$keys" \
      --connections 1 --warmup 0 --duration 30 --requests "$RT_N" \
      --pg-stats "$(url 18089 stats/pg)" >> "$OUT/load.jsonl"
  done
  stop_servers
fi

# The database far away: each handler on one connection, through a proxy without delay (near)
# and through one holding the traffic FAR_US in each direction (far), on two servers sharing the
# database. The report divides the latency added by the round-trip time.
if want far-postgres; then
  pg_reset
  start_server 18091 --store postgres --database-url "$PG_URL" --pg-delay-us 0
  start_server 18092 --store postgres --database-url "$PG_URL" --pg-delay-us "$FAR_US"
  for route in pg/bare pg/hand pg/plain pg/atomic tpg/bare tpg/hand tpg/plain tpg/atomic \
    diesel/bare diesel/hand diesel/plain diesel/atomic; do
    handler=${route#pg/}
    for side in near:18091 far:18092; do
      IFS=: read -r name port <<< "$side"
      load "far-$((2 * FAR_US))us/$name-${handler//\//-}" --url "$(url "$port" "$route")" --connections 1
    done
  done
  stop_servers
fi

echo "- load average (1, 5, 15 min) at end: $(loadavg)" >> "$OUT/env.txt"
echo "- wall time of the run: $(((SECONDS - STARTED) / 60)) min $(((SECONDS - STARTED) % 60)) s" >> "$OUT/env.txt"
[[ -z ${ALLOCATOR:-} ]] || echo "- the server's global allocator: $ALLOCATOR" >> "$OUT/env.txt"

# --- report --------------------------------------------------------------------------------------
CRITERION_DIR=/nonexistent
want criterion && CRITERION_DIR=$TARGET_DIR/criterion
"$BIN/idem-bench-report" --criterion "$CRITERION_DIR" --load "$OUT/load.jsonl" \
  --env "$OUT/env.txt" > "$OUT/latest.md"
if [[ $ONLY != ,all, || -n ${ALLOCATOR:-} ]]; then
  # BENCHMARKS.md's results are the defaults users get: glibc's allocator.
  cp "$OUT/latest.md" "$OUT/only.md"
elif [[ ${QUICK:-0} != 1 ]]; then
  # Replace everything between the markers in BENCHMARKS.md with the new tables.
  awk -v report="$OUT/latest.md" '
    /<!-- results:begin -->/ { print; while ((getline line < report) > 0) print line; skip = 1; next }
    /<!-- results:end -->/ { skip = 0 }
    !skip { print }
  ' BENCHMARKS.md > BENCHMARKS.md.new && mv BENCHMARKS.md.new BENCHMARKS.md
fi
cat "$OUT/latest.md"
