#!/usr/bin/env bash
# Measures the runtime changes proposed in bench/proposals/*.patch against the code they patch,
# in the same run: both trees are HEAD extracted with `git archive`, one with the patches
# applied, built into one target directory (dependencies are shared, so the second build only
# compiles the idem crates). About 4 minutes of building and 3 of measuring on 2 cores.
#
#   bench/compare-proposals.sh
#
# Prints a Markdown table: the fingerprint and in-process overhead (criterion medians), and on
# PostgreSQL the WAL written per replay, the round trips per request counted on the wire, and
# replay and fresh throughput over loopback with 32 connections.
set -euo pipefail

cd "$(dirname "$0")/.."
WORK=${WORK:-$(mktemp -d /tmp/idem-proposals.XXXXXX)}
PG=postgres://postgres@127.0.0.1:5432/idem_bench_cmp
export CARGO_TARGET_DIR=$WORK/target
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

for tree in base proposed; do
  mkdir -p "$WORK/$tree"
  git archive HEAD | tar -x -C "$WORK/$tree"
done
(cd "$WORK/proposed" && for p in bench/proposals/0*.patch; do git apply "$p"; done)
for tree in base proposed; do
  (cd "$WORK/$tree" && cargo build -q --release -p idem-bench --bins && cargo bench -q -p idem-bench --no-run 2> /dev/null)
  # Keep each tree's binaries: the two builds share file names.
  mkdir -p "$WORK/bin-$tree"
  cp "$CARGO_TARGET_DIR"/release/idem-bench-{server,load} "$WORK/bin-$tree/"
  for b in fingerprint overhead; do
    cp "$(ls -t "$CARGO_TARGET_DIR"/release/deps/$b-* | grep -v '\.d$' | head -1)" "$WORK/bin-$tree/$b"
  done
done

if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start
  sleep 2
fi

# median NS: criterion's `bencher` output, "test NAME ... bench: N ns/iter".
crit() {
  "$WORK/bin-$1/$2" --bench --warm-up-time 0.5 --measurement-time 2 --output-format bencher "$3" 2>/dev/null |
    awk '/bench:/ { gsub(",", "", $5); printf "%s %.2f\n", $2, $5 / 1000 }'
}

declare -A R
for tree in base proposed; do
  while read -r name us; do R[$tree,$name]=$us; done < <(crit "$tree" fingerprint of_request)
  while read -r name us; do R[$tree,$name]=$us; done < <(crit "$tree" overhead '(bare|idem_fresh|idem_replay)$')
done

lsn() { psql -h 127.0.0.1 -U postgres -d idem_bench_cmp -Atc 'select pg_current_wal_lsn()'; }
for tree in base proposed; do
  psql -q -h 127.0.0.1 -U postgres -d postgres -c 'DROP DATABASE IF EXISTS idem_bench_cmp' \
    -c 'CREATE DATABASE idem_bench_cmp'
  "$WORK/bin-$tree/idem-bench-server" --bind 127.0.0.1:18095 --store postgres --database-url "$PG" \
    --count-round-trips --max-seconds 300 > "$WORK/server-$tree.log" 2>&1 &
  PIDS+=($!)
  sleep 2
  L=("$WORK/bin-$tree/idem-bench-load" --url http://127.0.0.1:18095/idem)
  "${L[@]}" --connections 1 --warmup 0 --duration 5 --requests 200 > /dev/null 2>&1
  for keys in fresh fixed; do
    "${L[@]}" --keys "$keys" --connections 1 --warmup 0 --duration 20 --requests 500 \
      --pg-stats http://127.0.0.1:18095/stats/pg 2> /dev/null > "$WORK/rt-$tree-$keys.json"
    R[$tree,rt-$keys]=$(jq -r '((.pg.round_trips - .pg.connections) / .requests * 100 | round) / 100' "$WORK/rt-$tree-$keys.json")
  done
  a=$(lsn)
  "${L[@]}" --keys fixed --connections 1 --warmup 0 --duration 20 --requests 500 > /dev/null 2>&1
  b=$(lsn)
  R[$tree,wal]=$(psql -h 127.0.0.1 -U postgres -d idem_bench_cmp -Atc "select round(pg_wal_lsn_diff('$b','$a') / 500.0)")
  for keys in fixed fresh; do
    R[$tree,rps-$keys]=$("${L[@]}" --keys "$keys" --connections 32 --warmup 1 --duration 4 2> /dev/null | jq -r '.rps | round')
  done
  kill "${PIDS[-1]}"
  wait "${PIDS[-1]}" 2> /dev/null || true
done

echo "| measure | current | proposed |"
echo "|---|--:|--:|"
for size in 100B 1KB 10KB 1MB; do
  echo "| fingerprint, $size JSON (µs) | ${R[base,fingerprint-$size/of_request]:-–} | ${R[proposed,fingerprint-$size/of_request]:-–} |"
done
for size in 100B 1KB 10KB 1MB; do
  for f in bare idem_fresh idem_replay; do
    echo "| in process, $size, $f (µs) | ${R[base,overhead-$size/$f]:-–} | ${R[proposed,overhead-$size/$f]:-–} |"
  done
done
echo "| PostgreSQL: WAL bytes per replay | ${R[base,wal]} | ${R[proposed,wal]} |"
echo "| PostgreSQL: round trips per fresh request (wire) | ${R[base,rt-fresh]} | ${R[proposed,rt-fresh]} |"
echo "| PostgreSQL: round trips per replay (wire) | ${R[base,rt-fixed]} | ${R[proposed,rt-fixed]} |"
echo "| PostgreSQL: replays/s, 32 connections | ${R[base,rps-fixed]} | ${R[proposed,rps-fixed]} |"
echo "| PostgreSQL: fresh requests/s, 32 connections | ${R[base,rps-fresh]} | ${R[proposed,rps-fresh]} |"
echo
echo "Load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
