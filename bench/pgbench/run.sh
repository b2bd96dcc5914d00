#!/usr/bin/env bash
# Replays the PostgreSQL statements of each one-INSERT design with pgbench, on tables shaped as
# the store's (setup.sql) in a database `pgb` of the local server, and prints each script's
# throughput and PostgreSQL's CPU per transaction (every postgres process, exited backends
# included through the postmaster's children's times). 8 clients; run the scripts alternately.
#
#   bench/pgbench/run.sh                       # every script, twice, alternating
#   bench/pgbench/run.sh atomic_fnonce.sql     # one script
#   ROUNDS=3 SECS=5 bench/pgbench/run.sh a.sql b.sql   # three alternating rounds of 5 s each
#
# Scripts:
# - bare: the handler's one INSERT, autocommit (the baseline).
# - hand: the hand-written exactly-once handler (five statements, one commit).
# - plain_now / plain_hot: plain mode's claim, the handler's INSERT and the completion, three
#   commits (plain_hot on a table made for HOT completions).
# - plain_min: the least any design with plain mode's guarantee can send: a claim that commits
#   before the handler runs, the handler's own INSERT, a completion; each a one-row write of a
#   bigint key with no other index. The floor of plain mode on this database.
# - atomic_store: one-commit atomic mode's messages as the store sends them (simple protocol:
#   `BEGIN` with the claim's function call, the INSERT, the completion's call with `COMMIT` and
#   sqlx's `BEGIN`, the pool's `ROLLBACK`), the payload as hex text.
# - atomic_pipelined: the same function calls over the extended protocol, pipelined: `BEGIN` and
#   the claim behind one `Sync`, the completion and `COMMIT` behind another, the payload bound
#   as a parameter: the design sqlx cannot send (its issue #408), as PostgreSQL would run it.
# - atomic_store_unbooked: atomic_store without sqlx's count of open transactions (no `BEGIN`
#   after the `COMMIT`, no `ROLLBACK`): what that bookkeeping costs, at most (pgbench sends the
#   `ROLLBACK` on its own, where the store's goes out with the pool's check).
# - atomic_store_no_payload: atomic_store with a 2-byte payload: what the 1 KB payload as hex
#   text costs.
# - atomic_store_exec: atomic_store with the three statements prepared once per session (SQL
#   `PREPARE`) and run by `EXECUTE`, still as simple-protocol text.
# - atomic_extended: the same function calls as prepared statements over the extended protocol,
#   one wait each (two waits more than atomic_store), the payload bound as a parameter.
# - atomic_now, atomic_fnonce, prep_once: earlier designs of one-commit mode.
set -euo pipefail
cd "$(dirname "$0")"
PG="-h 127.0.0.1 -U postgres"
psql -q $PG -d postgres -c 'DROP DATABASE IF EXISTS pgb' -c 'CREATE DATABASE pgb'
psql -q $PG -d pgb -f setup.sql -f functions.sql > /dev/null
PAYLOAD=$(head -c 1100 /dev/urandom | od -An -tx1 | tr -d ' \n')
mode() { case $1 in atomic_now* | atomic_fnonce* | atomic_store*) echo simple ;; *) echo prepared ;; esac; }
pgcpu() {
  local t=0 f
  for p in $(pgrep -x postgres); do
    read -r -a f 2>/dev/null < "/proc/$p/stat" || continue
    t=$((t + f[13] + f[14] + f[15] + f[16]))
  done
  echo "$t"
}
# `prepared` starts at 0 for every client; atomic_store_exec sets it once it has prepared.
one() {
  local before after out tx
  before=$(pgcpu)
  out=$(pgbench $PG -n -M "$(mode "$1")" -c 8 -j 1 -T "${SECS:-4}" -D pl="$PAYLOAD" -D prepared=0 -f "$1" pgb 2>&1)
  after=$(pgcpu)
  tx=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<< "$out")
  echo "$1: $(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<< "$out") tps, PostgreSQL $(((after - before) * 1000000 / $(getconf CLK_TCK) / (tx > 0 ? tx : 1))) µs per transaction"
}
scripts=("$@")
[[ ${#scripts[@]} -gt 0 ]] || scripts=(bare.sql hand.sql atomic_store.sql atomic_pipelined.sql plain_min.sql plain_now.sql plain_hot.sql)
for round in $(seq "${ROUNDS:-2}"); do for s in "${scripts[@]}"; do one "$s"; done; done
