#!/usr/bin/env bash
# What each part of the database bus's claim and send paths costs on Postgres: pgbench runs of
# the statements in costs/, each toggling or isolating one part, on a fresh database each,
# round-robin (so that a busy moment of a shared machine spreads over every variant), the
# median of --rounds. Messages per second = transactions per second × batch.
#
#   benchmarks/bus/costs.sh [--admin-url URL] [--seconds 5] [--clients 4] [--batch 10]
#                           [--rounds 3] [--backlog 200000]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
admin=${BUS_BENCH_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/test}
seconds=5 clients=4 batch=10 rounds=3 backlog=200000
while [ $# -gt 0 ]; do
  case $1 in
    --admin-url) admin=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --backlog) backlog=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
db=bus_costs_$$
url=${admin%/*}/$db
migration=$here/../../messagebus/migrations/postgres/1000001_bus.sql
cleanup() { psql -q "$admin" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; }
trap cleanup EXIT

fresh() { # $1: rows waiting on queue q
  cleanup
  psql -q "$admin" -c "CREATE DATABASE $db" >/dev/null
  psql -q -v ON_ERROR_STOP=1 "$url" -f "$migration" >/dev/null
  psql -q -v ON_ERROR_STOP=1 "$url" >/dev/null <<SQL
INSERT INTO bus_queues VALUES ('q', 'q_dead_letter', 30000, 5), ('q_dead_letter', NULL, 30000, 0);
INSERT INTO bus_messages (queue, body, visible_at)
SELECT 'q', repeat('x', 200), now() - interval '1 hour' + g * interval '1 microsecond'
FROM generate_series(1, $1) g;
VACUUM ANALYZE;
SQL
}

run() { # $1: script; prints messages/s (consumer_refresh: rows/s, one a transaction)
  local tps b=$batch
  [ "$1" = consumer_refresh ] && b=1
  tps=$(pgbench -n -M extended -c "$clients" -j 2 -T "$seconds" -D batch="$batch" \
        -f "$here/costs/$1.sql" "$url" 2>/dev/null | awk '/^tps/ {print $3; exit}')
  awk -v t="$tps" -v b="$b" 'BEGIN { printf "%.0f\n", t * b }'
}

declare -A got
variants=(claim_shipped claim_no_dead_letter claim_random_receipt claim_ceiling
          send_shipped send_notify_inside send_transaction send_no_notify send_not_durable
          consumer_refresh)
for r in $(seq "$rounds"); do
  for v in "${variants[@]}"; do
    case $v in
      claim_*) fresh "$backlog" ;;
      *) fresh 0 ;;
    esac
    got[$v]="${got[$v]:-} $(run "$v")"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "clients $clients, batch $batch, ${seconds} s each, median of $rounds, backlog $backlog"
echo "| statement | messages/s (consumer refresh: rows/s) | runs | / shipped |"
echo "| --- | --- | --- | --- |"
base_claim=$(echo "${got[claim_shipped]}" | median)
base_send=$(echo "${got[send_shipped]}" | median)
for v in "${variants[@]}"; do
  m=$(echo "${got[$v]}" | median)
  case $v in
    claim_*) base=$base_claim ;; send_*) base=$base_send ;; *) base=$m ;;
  esac
  ratio=$(awk -v a="$m" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  echo "| $v | $m | ${got[$v]# } | $ratio |"
done
