#!/usr/bin/env bash
# Stripe's official SDKs against the payments example: stripe-python (PyPI) and stripe-node
# (npm), pinned, drive the running example on loopback with their own keys, forms, error
# classes and retries (examples/sdk/python, examples/sdk/node). CI runs this; so can you, from
# anywhere:
#
#   examples/sdk/run.sh
#
# It builds the payments binary, installs the SDKs into target/ (a venv in target/sdk-python,
# `npm ci` in target/sdk-node from node/package-lock.json), starts the server on a free loopback
# port with a fresh SQLite file and ERROR_FORMAT=stripe, runs the Python tests (unittest) and
# the Node tests (`node --test`), and stops the server at the end, pass or fail. The exit status
# is non-zero if either suite failed. Needs python3 (3.9+) and node (20+).
set -euo pipefail
cd "$(dirname "$0")/../.."

# The Python SDK's version; the Node SDK's is pinned by node/package-lock.json.
STRIPE_PYTHON_VERSION=16.1.0
# Hard bound on each suite, whatever happens.
TIME_LIMIT=${SDK_TIME_LIMIT:-300}
TARGET=${CARGO_TARGET_DIR:-target}
VENV=$TARGET/sdk-python/venv
NODE_DIR=$TARGET/sdk-node
SDK=examples/sdk

echo "sdk: building payments"
cargo build --quiet -p idem-examples --bin payments

if [[ "$("$VENV/bin/python" -c 'import stripe; print(stripe.VERSION)' 2>/dev/null)" != "$STRIPE_PYTHON_VERSION" ]]; then
  echo "sdk: installing stripe $STRIPE_PYTHON_VERSION (PyPI) into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "stripe==$STRIPE_PYTHON_VERSION"
fi
PYTHON="$(cd "$VENV/bin" && pwd)/python"

mkdir -p "$NODE_DIR"
cp "$SDK/node/package.json" "$SDK/node/package-lock.json" "$SDK"/node/*.test.mjs "$NODE_DIR/"
pinned=$(node -p "require('./$SDK/node/package-lock.json').packages['node_modules/stripe'].version")
installed=$(cd "$NODE_DIR" && node -p "require('./node_modules/stripe/package.json').version" 2>/dev/null || true)
if [[ "$installed" != "$pinned" ]]; then
  echo "sdk: installing stripe $pinned (npm) into $NODE_DIR"
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
fi

RUN=$(mktemp -d "${TMPDIR:-/tmp}/idem-sdk.XXXXXX")
# shellcheck source=../scripts/payments.sh
source examples/scripts/payments.sh
stop() {
  local status=$?
  stop_payments
  if [[ $status -ne 0 && -f "$RUN/server.log" ]]; then
    echo "sdk: the server's last log lines:" >&2
    tail -n 40 "$RUN/server.log" >&2
  fi
  rm -rf "$RUN"
  exit "$status"
}
trap stop EXIT INT TERM

# `tok_slow` takes a second: long enough for a duplicate to find it running, short enough for
# the SDKs' backoff to outlast it.
start_payments sdk DATABASE_URL="sqlite://$RUN/payments.db" ERROR_FORMAT=stripe SLOW_MS=1000
export PAYMENTS_URL="http://$ADDR"
# Nothing written into the source tree (no __pycache__ beside the tests).
export PYTHONDONTWRITEBYTECODE=1
echo "sdk: payments on $PAYMENTS_URL (ERROR_FORMAT=stripe)"

failed=0
echo "sdk: stripe-python $STRIPE_PYTHON_VERSION"
(cd "$SDK/python" && timeout --kill-after=10 "$TIME_LIMIT" \
  "$PYTHON" -m unittest -v test_stripe_python) || failed=1
echo "sdk: stripe-node $pinned"
(cd "$NODE_DIR" && timeout --kill-after=10 "$TIME_LIMIT" \
  node --test --test-timeout=60000 stripe-node.test.mjs) || failed=1
exit "$failed"
