#!/usr/bin/env bash
# Coverage-guided runs of idem's fuzz targets under libFuzzer, with cargo fuzz on the stable
# toolchain (RUSTC_BOOTSTRAP lets it pass its -Z sanitizer flags; no nightly is needed).
#
#   fuzz/run.sh [SECONDS] [TARGET...]     # default: 60 s for each of the six targets
#   fuzz/run.sh 600                       # the long run: 10 minutes per target
#
# Each target's corpus grows in fuzz/libfuzzer/corpus/<target> (kept between runs, not
# committed), its last lines of output go to fuzz/libfuzzer/<target>.log, and a failing input to
# fuzz/libfuzzer/artifacts/<target>/. A single allocation over 256 MiB counts as a failure. The
# instrumented build goes to target/libfuzzer (inside the workspace's target directory, apart
# from the ordinary builds so neither waits on the other's lock).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(key canonical_json json_numbers form_body stored_response ttl)
fi

command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1

fuzz=(--fuzz-dir fuzz/libfuzzer -O --target-dir target/libfuzzer)
cargo fuzz build "${fuzz[@]}"
status=0
for target in "${targets[@]}"; do
  mkdir -p "fuzz/libfuzzer/corpus/$target"
  echo "== $target: ${seconds}s"
  if ! cargo fuzz run "${fuzz[@]}" "$target" -- \
      -max_total_time="$seconds" -malloc_limit_mb=256 -rss_limit_mb=2048 -print_final_stats=1 \
      > "fuzz/libfuzzer/$target.log" 2>&1; then
    status=1
    echo "$target FAILED: see fuzz/libfuzzer/$target.log and fuzz/libfuzzer/artifacts/$target/"
  fi
  # The last status line (coverage, features, corpus, exec/s) and libFuzzer's final statistics.
  grep -E "^#[0-9]+" "fuzz/libfuzzer/$target.log" | tail -n 1
  grep -E "^stat::|^Done [0-9]+ runs" "fuzz/libfuzzer/$target.log" || true
done
exit $status
