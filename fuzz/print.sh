#!/usr/bin/env bash
# Fuzzes the episode print reader and a pass from a print with the structured mutation fuzzer
# in fuzz/src/bin/print_mutate.rs, which needs no AFL.
#   fuzz/print.sh [SECONDS] [SEED]     default 300 s, seed 1
# Runs under a 2 GiB address-space limit: a print that makes the analyser allocate more aborts
# the run, and is kept. Inputs with a new outcome are left in $OUT/kept (copy those worth
# keeping into fuzz/corpus/print/); a crash or hang is copied into fuzz/crashes/print/, which
# analysis/tests/fuzz_replay.rs replays in every test run. `print-mutate seed` and
# `print-mutate craft` made the corpus's seeds and forged prints.
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_TO_RUN=${1:-300}
SEED=${2:-1}
TARGET=${CARGO_TARGET_DIR:-$PWD/../target}/fuzz
OUT=${FUZZ_OUT:-$(mktemp -d)}
CARGO_TARGET_DIR=$TARGET cargo build --release --quiet --no-default-features --bin print-mutate
status=0
(ulimit -v 2097152; exec "$TARGET/release/print-mutate" run corpus/print "$OUT" "$SECONDS_TO_RUN" "$SEED") || status=$?
for f in "$OUT"/crashes/*; do
  [ -e "$f" ] && cp "$f" crashes/print/ && echo "kept $(basename "$f") in fuzz/crashes/print/" >&2
done
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ] && [ "$status" -ne 3 ]; then
  # Killed by the memory limit (or another abort): the input being run is the culprit.
  if [ -e "$OUT/current.pcase" ]; then
    cp "$OUT/current.pcase" "crashes/print/abort-$status-$(date +%s).pcase"
    echo "aborted ($status): the input kept in fuzz/crashes/print/" >&2
  fi
fi
echo "new outcomes kept in $OUT/kept: $(ls "$OUT/kept" 2>/dev/null | wc -l)"
exit "$status"
