#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL cluster made with initdb and left at the
# server's default settings, autovacuum included (never the machine's shared server, whose
# autovacuum is off): what anything measured over a store's life must run on. The command gets
# the cluster's URL as ARCHIVIST_BENCH_PG_URL and ARCHIVIST_TEST_PG_URL; the cluster is
# removed when it ends.
#
#   scripts/with-throwaway-postgres.sh [--autovacuum on|off] [--log FILE] [--pg-option SETTING]... -- CMD...
#   e.g. scripts/with-throwaway-postgres.sh -- cargo bench -p archivist --bench pipeline
#
# --log FILE keeps the server's log; --pg-option name=value passes a server setting (-c).
set -euo pipefail

autovacuum=on
log=
extra=
while [ $# -gt 0 ]; do
  case "$1" in
    --autovacuum) autovacuum=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --pg-option) extra="$extra -c $2"; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
case "$autovacuum" in on|off) ;; *) echo "--autovacuum: on or off, not '$autovacuum'" >&2; exit 2 ;; esac
[ $# -gt 0 ] || { echo "usage: $0 [--autovacuum on|off] [--log FILE] [--pg-option SETTING]... -- CMD..." >&2; exit 2; }

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
url="postgres://postgres@127.0.0.1:$port/postgres"
ARCHIVIST_BENCH_PG_URL=$url ARCHIVIST_TEST_PG_URL=$url "$@"
