#!/usr/bin/env bash
# Fuzzes the analyser's audio decoding (every container it reads) with the structured mutation
# fuzzer in fuzz/src/bin/audio_mutate.rs, which needs no AFL.
#   fuzz/audio.sh [SECONDS] [SEED]     default 300 s, seed 1
# Runs under a 2 GiB address-space limit: an input that makes the analyser allocate more
# aborts the run, and is kept. Inputs with a new outcome are left in $OUT/kept (copy those
# worth keeping into fuzz/corpus/audio/); a crash or hang is copied into fuzz/crashes/audio/,
# which analysis/tests/fuzz_replay.rs replays in every test run.
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_TO_RUN=${1:-300}
SEED=${2:-1}
TARGET=${CARGO_TARGET_DIR:-$PWD/../target}/fuzz
OUT=${FUZZ_OUT:-$(mktemp -d)}
CARGO_TARGET_DIR=$TARGET cargo build --release --quiet --no-default-features --bin audio-mutate
status=0
(ulimit -v 2097152; exec "$TARGET/release/audio-mutate" run corpus/audio "$OUT" "$SECONDS_TO_RUN" "$SEED") || status=$?
for f in "$OUT"/crashes/*; do
  [ -e "$f" ] && cp "$f" crashes/audio/ && echo "kept $(basename "$f") in fuzz/crashes/audio/" >&2
done
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ] && [ "$status" -ne 3 ]; then
  # Killed by the memory limit (or another abort): the input being analysed is the culprit.
  for f in "$OUT"/current.*; do
    [ -e "$f" ] && cp "$f" "crashes/audio/abort-$status-$(date +%s)-$(basename "$f")" && echo "aborted ($status) on $(basename "$f"): kept in fuzz/crashes/audio/" >&2
  done
fi
echo "new outcomes kept in $OUT/kept: $(ls "$OUT/kept" 2>/dev/null | wc -l)"
exit "$status"
