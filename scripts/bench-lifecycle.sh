#!/usr/bin/env bash
# The datastore's life-cycle benchmark (datastore/benches/lifecycle.rs), on a throwaway
# PostgreSQL cluster made with initdb and left at the server's default settings, autovacuum
# included (scripts/with-throwaway-postgres.sh): never the machine's shared server, whose
# settings are not production's.
#
#   scripts/bench-lifecycle.sh [--autovacuum on|off] [--log FILE] [-- BENCH ARGS]
#   e.g. scripts/bench-lifecycle.sh -- reference --points 10,50,90
#        scripts/bench-lifecycle.sh --autovacuum off -- reference --no-sqlite
#        scripts/bench-lifecycle.sh --log /tmp/pg.log -- reference --no-sqlite --diagnose /tmp/lease.csv
#
# --log FILE keeps the server's log (checkpoints and every autovacuum are logged in it when the
# benchmark's --diagnose is given).
set -euo pipefail
cd "$(dirname "$0")/.."

server=()
while [ $# -gt 0 ]; do
  case "$1" in
    --autovacuum|--log) server+=("$1" "$2"); shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

# ARCHIVIST_BENCH_PG_STATS=1: also print the server's time per statement (pg_stat_statements).
[ -n "${ARCHIVIST_BENCH_PG_STATS:-}" ] && server+=(--pg-option shared_preload_libraries=pg_stat_statements)
# The benchmark's --diagnose: the time per statement of each lease_next (planning included);
# every autovacuum and checkpoint in the log.
for a in "$@"; do
  if [ "$a" = --diagnose ]; then
    server+=(--pg-option shared_preload_libraries=pg_stat_statements
      --pg-option pg_stat_statements.track_planning=on
      --pg-option log_autovacuum_min_duration=0 --pg-option log_checkpoints=on)
  fi
done

exec scripts/with-throwaway-postgres.sh "${server[@]}" -- \
  cargo bench -p datastore --bench lifecycle --all-features -- "$@"
