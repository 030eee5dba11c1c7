#!/usr/bin/env bash
# Runs a command as a measuring turn among cooperating benchmarks (datastore/benches/common/
# quiet.rs): waits until no other benchmark measures, then holds a file in
# $ARCHIVIST_BENCH_QUIET_DIR for as long as the command runs, so that life-cycle benchmarks
# driving research beside it pause meanwhile.
#
#   ARCHIVIST_BENCH_QUIET_DIR=/tmp/quiet scripts/bench-quietly.sh cargo bench -p archivist --bench pipeline
set -euo pipefail
dir=${ARCHIVIST_BENCH_QUIET_DIR:?set ARCHIVIST_BENCH_QUIET_DIR to the directory the benchmarks share}
mkdir -p "$dir"
others() { find "$dir" -maxdepth 1 -type f ! -name ".*" ! -name "$$-*" | grep -q .; }
while :; do
  while others; do sleep 1; done
  mine="$dir/$$-$(printf '%020d' "$(date +%s%N)")-$(basename "$1")"
  : >"$mine"
  trap 'rm -f "$mine"' EXIT; trap 'exit 130' INT TERM
  # Another that appeared at the same moment with an earlier time keeps its turn.
  t=$(basename "$mine" | cut -d- -f2)
  earlier=$(find "$dir" -maxdepth 1 -type f ! -name ".*" ! -name "$$-*" -printf '%f\n' |
    awk -F- -v t="$t" '$2 < t' | head -1)
  [ -z "$earlier" ] && break
  rm -f "$mine"
done
sleep 1 # drivers look between steps: let a step in flight end
"$@"
