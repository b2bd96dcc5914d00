# Sourced by the contract, SDK and gRPC scripts: runs an example's server (payments, agents or
# ledger; built in $TARGET/debug) on a free loopback port, logging to $RUN/server.log, and stops
# it. Sets SERVER_PID and ADDR.

SERVER_PID=

# start_example BIN WHO [NAME=VALUE...]: starts the example BIN with the given environment and
# waits (bounded) until it says where it listens.
start_example() {
  local bin=$1 who=$2
  shift 2
  # Emptied (or created) before the server opens it, so the wait reads only this run's lines.
  : >"$RUN/server.log"
  env "$@" BIND=127.0.0.1:0 RUST_LOG="warn,$bin=info" NO_COLOR=1 \
    "$TARGET/debug/$bin" >"$RUN/server.log" 2>&1 &
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

# start_payments WHO [NAME=VALUE...]: start_example for payments.
start_payments() {
  start_example payments "$@"
}

# stop_example: stops the server started last; SIGTERM, then SIGKILL after 5 s.
stop_example() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=
}

# stop_payments: stop_example, for the scripts that started payments.
stop_payments() {
  stop_example
}
