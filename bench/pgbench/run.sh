#!/usr/bin/env bash
# Replays the PostgreSQL statements of each one-INSERT design with pgbench, on tables shaped as
# the store's (setup.sql) in a database `pgb` of the local server, and prints each script's
# throughput and PostgreSQL's CPU per transaction (every postgres process, exited backends
# included through the postmaster's children's times). 8 clients; run the scripts alternately.
#
#   bench/pgbench/run.sh                       # every script, twice, alternating
#   bench/pgbench/run.sh atomic_fnonce.sql     # one script
#
# Scripts: atomic_now (the previous one-commit mode, simple protocol), atomic_fnonce (the current
# one: function calls, simple protocol), prep_once (the same work as prepared statements),
# hand (the hand-written exactly-once handler), plain_now / plain_hot (plain mode's claim and
# completion; plain_hot on a table made for HOT completions).
set -euo pipefail
cd "$(dirname "$0")"
PG="-h 127.0.0.1 -U postgres"
psql -q $PG -d postgres -c 'DROP DATABASE IF EXISTS pgb' -c 'CREATE DATABASE pgb'
psql -q $PG -d pgb -f setup.sql -f functions.sql > /dev/null
PAYLOAD=$(head -c 1100 /dev/urandom | od -An -tx1 | tr -d ' \n')
mode() { case $1 in atomic_now* | atomic_fnonce*) echo simple ;; *) echo prepared ;; esac; }
pgcpu() {
  local t=0 f
  for p in $(pgrep -x postgres); do
    read -r -a f < "/proc/$p/stat" 2>/dev/null || continue
    t=$((t + f[13] + f[14] + f[15] + f[16]))
  done
  echo "$t"
}
one() {
  local before after out tx
  before=$(pgcpu)
  out=$(pgbench $PG -n -M "$(mode "$1")" -c 8 -j 1 -T "${SECS:-4}" -D pl="$PAYLOAD" -f "$1" pgb 2>&1)
  after=$(pgcpu)
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<< "$out")
  echo "$1: $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<< "$out") tps, PostgreSQL $(((after - before) * 1000000 / $(getconf CLK_TCK) / (tx > 0 ? tx : 1))) µs per transaction"
}
scripts=("$@")
[[ ${#scripts[@]} -gt 0 ]] || scripts=(atomic_now.sql atomic_fnonce.sql prep_once.sql hand.sql plain_now.sql plain_hot.sql)
for round in 1 2; do for s in "${scripts[@]}"; do one "$s"; done; done
