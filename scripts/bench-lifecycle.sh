#!/usr/bin/env bash
# The datastore's life-cycle benchmark (datastore/benches/lifecycle.rs), on a throwaway
# PostgreSQL cluster made with initdb and left at the server's default settings, autovacuum
# included: never the machine's shared server, whose settings are not production's.
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

autovacuum=on
log=
while [ $# -gt 0 ]; do
  case "$1" in
    --autovacuum) autovacuum=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
case "$autovacuum" in on|off) ;; *) echo "--autovacuum: on or off, not '$autovacuum'" >&2; exit 2 ;; esac

# ARCHIVIST_BENCH_PG_STATS=1: also print the server's time per statement (pg_stat_statements).
extra=
[ -n "${ARCHIVIST_BENCH_PG_STATS:-}" ] && extra="-c shared_preload_libraries=pg_stat_statements"
# The benchmark's --diagnose: the time per statement of each lease_next (planning included);
# every autovacuum and checkpoint in the log.
for a in "$@"; do
  if [ "$a" = --diagnose ]; then
    extra="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
    extra="$extra -c log_autovacuum_min_duration=0 -c log_checkpoints=on"
  fi
done

PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || command -v initdb)")
[ -x "$PGBIN/initdb" ] || { echo "initdb not found: install PostgreSQL's server package" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
dir=$(mktemp -d)
as_pg() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; su postgres -c "$*"; else bash -c "$*"; fi; }
stop() {
  as_pg "$PGBIN/pg_ctl -D $dir/data -m fast stop" >/dev/null 2>&1 || true
  [ -z "$log" ] || cp "$dir/log" "$log" || true
  rm -rf "$dir"
}
trap stop EXIT
as_pg "$PGBIN/initdb -D $dir/data -U postgres -A trust" >/dev/null
as_pg "$PGBIN/pg_ctl -D $dir/data -l $dir/log -w start -o '-p $port -k $dir -c listen_addresses=127.0.0.1 -c autovacuum=$autovacuum $extra'" >/dev/null
echo "== throwaway PostgreSQL on 127.0.0.1:$port, autovacuum $autovacuum, other settings at their defaults" >&2
ARCHIVIST_BENCH_PG_URL="postgres://postgres@127.0.0.1:$port/postgres" \
  cargo bench -p datastore --bench lifecycle --all-features -- "$@"
