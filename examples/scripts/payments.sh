# Sourced by the contract and SDK scripts: runs the payments example (built in $TARGET/debug)
# on a free loopback port, logging to $RUN/server.log, and stops it. Sets SERVER_PID and ADDR.

SERVER_PID=

# start_payments WHO [NAME=VALUE...]: starts the server with the given environment and waits
# (bounded) until it says where it listens.
start_payments() {
  local who=$1
  shift
  # Emptied (or created) before the server opens it, so the wait reads only this run's lines.
  : >"$RUN/server.log"
  env "$@" BIND=127.0.0.1:0 RUST_LOG=warn,payments=info NO_COLOR=1 \
    "$TARGET/debug/payments" >"$RUN/server.log" 2>&1 &
  SERVER_PID=$!
  ADDR=
  for _ in $(seq 1 300); do
    ADDR=$(sed -n 's/.*listening on http:\/\/\([0-9.:]*\).*/\1/p' "$RUN/server.log" | head -n 1)
    [[ -n "$ADDR" ]] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "$who: the server exited" >&2; return 1; }
    sleep 0.1
  done
  echo "$who: the server did not start" >&2
  return 1
}

# stop_payments: SIGTERM, then SIGKILL after 5 s.
stop_payments() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}
