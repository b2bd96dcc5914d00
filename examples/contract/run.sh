#!/usr/bin/env bash
# Contract test: schemathesis generates requests from the payments and agents examples' own
# `GET /openapi.json` and checks every answer against it (no unexpected 5xx, every status, header,
# content type and body as documented, the idempotency engine's answers included). CI runs this;
# so can you, from anywhere:
#
#   examples/contract/run.sh                      # 40 examples per operation and phase
#   CONTRACT_EXAMPLES=200 examples/contract/run.sh
#   CONTRACT_SEED=1234 examples/contract/run.sh   # replay a run (its seed is printed)
#   CONTRACT_ERROR_FORMATS=stripe examples/contract/run.sh   # one format (default: both)
#   CONTRACT_SERVICES=agents examples/contract/run.sh   # one example (default: payments agents)
#   CONTRACT_WORKERS=4 examples/contract/run.sh   # concurrent requests; CI uses one worker, since
#     # with several, schemathesis 4.32.5 sometimes stops on an error of its own (a "Runtime
#     # Error" from hypothesis's lambda introspection racing across threads), not the server's
#
# It builds the binaries, installs schemathesis (pinned) into a venv under target/, starts each
# server on a free loopback port with a fresh SQLite file (payments once per error format,
# `ERROR_FORMAT=problem` then `stripe`: each serves a document of its own errors; agents, whose
# document its idempotency layer completes, once), and stops it at the end, pass or fail. The
# exit status is schemathesis's: non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/../.."

SCHEMATHESIS_VERSION=4.32.5
EXAMPLES=${CONTRACT_EXAMPLES:-40}
# Hard bound on the whole schemathesis run, whatever it finds.
TIME_LIMIT=${CONTRACT_TIME_LIMIT:-900}
TARGET=${CARGO_TARGET_DIR:-target}
VENV=$TARGET/contract/venv

SERVICES=${CONTRACT_SERVICES:-payments agents}
echo "contract: building $SERVICES"
for SERVICE in $SERVICES; do
  [[ $SERVICE == payments || $SERVICE == agents ]] || {
    echo "contract: CONTRACT_SERVICES names payments or agents, not \`$SERVICE\`" >&2
    exit 2
  }
  cargo build --quiet -p idem-examples --bin "$SERVICE"
done

if [[ "$("$VENV/bin/st" --version 2>/dev/null)" != "st, version $SCHEMATHESIS_VERSION" ]]; then
  echo "contract: installing schemathesis $SCHEMATHESIS_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi

RUN=$(mktemp -d "${TMPDIR:-/tmp}/idem-contract.XXXXXX")
# shellcheck source=../scripts/payments.sh
source examples/scripts/payments.sh
stop() {
  local status=$?
  stop_payments
  if [[ $status -ne 0 && -f "$RUN/server.log" ]]; then
    echo "contract: the server's last log lines:" >&2
    tail -n 40 "$RUN/server.log" >&2
  fi
  rm -rf "$RUN"
  exit "$status"
}
trap stop EXIT INT TERM

SEED=${CONTRACT_SEED:-$RANDOM$RANDOM}
# schemathesis against the server on $ADDR: st ARGS...
st() {
  timeout --kill-after=10 "$TIME_LIMIT" "$VENV/bin/st" --no-color "$@" \
    --max-examples "$EXAMPLES" --seed "$SEED" --workers ${CONTRACT_WORKERS:-1} --request-timeout 20
}

# Each error format documents its own errors (problem+json, or Stripe's envelope): both are
# checked, each against a server of its own.
if [[ " $SERVICES " == *" payments "* ]]; then
  for FORMAT in ${CONTRACT_ERROR_FORMATS:-problem stripe}; do
    rm -f "$RUN"/payments.db*
    # `tok_slow` made fast so the run stays short.
    start_payments contract DATABASE_URL="sqlite://$RUN/payments.db" SLOW_MS=50 \
      ERROR_FORMAT="$FORMAT"
    echo "contract: payments on http://$ADDR, ERROR_FORMAT=$FORMAT"

    echo "contract: $EXAMPLES examples per operation, seed $SEED (replay with CONTRACT_SEED=$SEED)"
    st --config-file examples/contract/schemathesis.toml run "http://$ADDR/openapi.json" \
      --header "Authorization: Bearer sk_test_contract"
    stop_payments
  done
fi

# agents: its idempotency layer documents the routes it covers.
if [[ " $SERVICES " == *" agents "* ]]; then
  # The action `slow` made fast so the run stays short.
  start_example agents contract DATABASE_URL="sqlite://$RUN/agents.db" SLOW_MS=50
  echo "contract: agents on http://$ADDR"
  echo "contract: $EXAMPLES examples per operation, seed $SEED (replay with CONTRACT_SEED=$SEED)"
  st --config-file examples/contract/agents.toml run "http://$ADDR/openapi.json" \
    --header "Authorization: Bearer agent_contract"
  stop_payments
fi
