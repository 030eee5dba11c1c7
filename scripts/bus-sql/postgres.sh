#!/usr/bin/env bash
# A researcher in another language on the Postgres database bus: the SQL the README documents
# ("The database bus from other languages"), run from psql. Tested by
# messagebus/tests/sql_postgres.rs. Usage: postgres.sh POSTGRES_URL
set -euo pipefail
url=$1
q() { psql "$url" -X -q -At -v ON_ERROR_STOP=1 "$@"; }
consumer=$(python3 -c 'import uuid; print(uuid.uuid4())')

# 1. Show that a researcher is alive (repeat every few seconds while running; delete on exit).
q -v id="$consumer" <<'SQL'
INSERT INTO bus_consumers (id, queue, last_seen) VALUES (:'id', 'pending_research', now())
ON CONFLICT (id) DO UPDATE SET last_seen = now();
SQL

# 2. Receive one work item: invisible to others for 30 s, with a new receipt.
row=$(q <<'SQL'
UPDATE bus_messages m
SET visible_at = now() + interval '30 seconds',
    receive_count = m.receive_count + 1,
    receipt = nextval('bus_receipts')
WHERE m.id = (SELECT id FROM bus_messages
              WHERE queue = 'pending_research' AND visible_at <= now()
              ORDER BY visible_at, id LIMIT 1
              FOR UPDATE SKIP LOCKED)
RETURNING m.id || '|' || m.receipt || '|' || m.body;
SQL
)
[ -n "$row" ] || { echo "no work" >&2; exit 1; }
IFS='|' read -r id receipt body <<<"$row"
echo "received $body"

# 3. Long work: extend the visibility (only this delivery's receipt can).
q -v id="$id" -v receipt="$receipt" <<'SQL'
UPDATE bus_messages SET visible_at = now() + interval '30 seconds'
WHERE id = :'id' AND receipt = :'receipt';
SQL

# 4. Send the result and delete the work item, in one transaction.
q -v id="$id" -v receipt="$receipt" -v body='{"result":1}' <<'SQL'
BEGIN;
INSERT INTO bus_messages (queue, body) VALUES ('completed_research', :'body');
SELECT pg_notify('archivist_bus', 'completed_research');
DELETE FROM bus_messages WHERE id = :'id' AND receipt = :'receipt';
COMMIT;
SQL

# 5. Done: stop counting as a researcher.
q -v id="$consumer" <<'SQL'
DELETE FROM bus_consumers WHERE id = :'id';
SQL
