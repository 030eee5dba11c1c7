#!/usr/bin/env bash
# Fuzzes message decoding with AFL++ through afl.rs (cargo-afl), on the stable toolchain.
#   scripts/fuzz.sh [SECONDS]     default 300
# Installs cargo-afl if missing (it builds AFL++ on first use), builds fuzz/ (a crate outside
# the workspace) into $CARGO_TARGET_DIR/fuzz, runs afl-fuzz from the seeds in
# fuzz/corpus/decode/, prints the executions and paths found, and copies any crash into
# fuzz/crashes/decode/, which `tests/suite/fuzz_replay.rs` replays in every test run.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-300}
command -v cargo-afl >/dev/null || cargo install cargo-afl --locked
TARGET=${CARGO_TARGET_DIR:-$PWD/target}/fuzz
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
(cd fuzz && CARGO_TARGET_DIR=$TARGET cargo afl build --release --quiet)
# No UI, no CPU-governor or core-pattern demands (a shared machine or a container).
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1
cargo afl fuzz -i fuzz/corpus/decode -o "$OUT" -V "$SECONDS_TO_RUN" "$TARGET/release/decode" >"$OUT/afl.log" 2>&1 || {
  tail -30 "$OUT/afl.log" >&2; exit 1; }
stats=$OUT/default/fuzzer_stats
for k in run_time execs_done execs_per_sec corpus_count saved_crashes saved_hangs stability; do
  grep -E "^$k " "$stats" || true
done
crashes=$(find "$OUT/default/crashes" -type f -name 'id:*' | wc -l)
if [ "$crashes" -gt 0 ]; then
  for f in "$OUT"/default/crashes/id:*; do cp "$f" "fuzz/crashes/decode/$(basename "$f" | tr ':,' '__')"; done
  echo "$crashes crash(es) copied to fuzz/crashes/decode/: fix them and keep them" >&2
  exit 1
fi
