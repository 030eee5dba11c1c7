#!/usr/bin/env bash
# A researcher in another language on the Postgres database bus: the SQL the book documents
# ("The database bus from other languages"), read out of docs/src/buses.md (book_sql.py) and run
# from psql, its $1, $2 given as psql variables. Tested by messagebus/tests/buses/sql_postgres.rs.
# Usage: postgres.sh POSTGRES_URL
set -euo pipefail
url=$1
here=$(dirname "$0")
# The book's statement NAME, its parameters $1, $2 as psql's :'p1', :'p2'.
sql() { python3 "$here/book_sql.py" postgres "$1" | sed -e "s/\\\$1/:'p1'/g" -e "s/\\\$2/:'p2'/g"; }
q() { psql "$url" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
consumer=$(python3 -c 'import uuid; print(uuid.uuid4())')

# 1. Count as a researcher (repeat every few seconds while running).
sql heartbeat | q -v p1="$consumer"

# 2. Receive one work item.
row=$(sql receive | q -F '|')
[ -n "$row" ] || { echo "no work" >&2; exit 1; }
IFS='|' read -r id receipt body <<<"$row"
echo "received $body"

# 3. Long work: extend the visibility.
sql extend | q -v p1="$id" -v p2="$receipt"

# 4. Send the result and delete the work item, in one transaction.
{
  echo 'BEGIN;'
  sql send | sed "s/:'p1'/:'body'/g"
  sql delete
  echo 'COMMIT;'
} | q -v body='{"result":1}' -v p1="$id" -v p2="$receipt" >/dev/null

# 5. Done: stop counting as a researcher.
sql leave | q -v p1="$consumer"
