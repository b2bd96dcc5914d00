#!/usr/bin/env bash
# Checks the README's promise that its quick start, copied into a new crate with the README's
# `[dependencies]`, compiles: builds exactly that crate, outside this workspace, with idem-runtime
# taken from this checkout (it is not published yet) and the workspace's dependency versions.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CRATE=$TARGET/quickstart-crate
rm -rf "$CRATE/src" && mkdir -p "$CRATE/src"

python3 - "$ROOT/README.md" "$CRATE" "$ROOT/idem-runtime" <<'PY'
import sys
readme, crate, runtime = sys.argv[1:]
text = open(readme).read()
toml = text.split("\n## Install\n", 1)[1].split("```toml\n", 1)[1].split("\n```", 1)[0]
dep = 'idem-runtime = { version = "0.1",'
assert dep in toml, "the README's [dependencies] name idem-runtime 0.1"
toml = toml.replace(dep, f'idem-runtime = {{ version = "0.1", path = "{runtime}",')
code = text.split("\n## Quick start\n", 1)[1].split("```rust\n", 1)[1].split("\n```", 1)[0]
open(f"{crate}/Cargo.toml", "w").write(
    '[package]\nname = "quickstart"\nversion = "0.0.0"\nedition = "2024"\n\n[workspace]\n\n'
    + toml + "\n")
open(f"{crate}/src/main.rs", "w").write(code + "\n")
PY
cp Cargo.lock "$CRATE/Cargo.lock"
echo "quickstart crate: cargo check in $CRATE"
(cd "$CRATE" && CARGO_TARGET_DIR="$CRATE/target" cargo check --quiet)
echo "quickstart crate: compiles"
