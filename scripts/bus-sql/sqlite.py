#!/usr/bin/env python3
"""A researcher in another language on the SQLite database bus: the SQL the README documents
("The database bus from other languages"), run from Python's sqlite3. Tested by
messagebus/tests/sql_sqlite.rs. Usage: sqlite.py PATH_TO_FILE"""
import sqlite3
import sys
import time
import uuid


def now_us():
    return int(time.time() * 1_000_000)


db = sqlite3.connect(sys.argv[1], timeout=10, isolation_level=None)
db.execute("PRAGMA journal_mode = WAL")
consumer = str(uuid.uuid4())

# 1. Show that a researcher is alive (repeat every few seconds while running; delete on exit).
db.execute(
    "INSERT INTO bus_consumers (id, queue, last_seen) VALUES (?, 'pending_research', ?) "
    "ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen",
    (consumer, now_us()),
)

# 2. Receive one work item: invisible to others for 30 s, with a new receipt.
db.execute("BEGIN IMMEDIATE")
row = db.execute(
    "UPDATE bus_messages SET visible_at = ?, receive_count = receive_count + 1, receipt = random() "
    "WHERE id = (SELECT id FROM bus_messages WHERE queue = 'pending_research' AND visible_at <= ? "
    "            ORDER BY visible_at, id LIMIT 1) "
    "RETURNING id, receipt, body",
    (now_us() + 30_000_000, now_us()),
).fetchone()
db.execute("COMMIT")
if row is None:
    sys.exit("no work")
message_id, receipt, body = row
print(f"received {body}")

# 3. Long work: extend the visibility (only this delivery's receipt can).
db.execute(
    "UPDATE bus_messages SET visible_at = ? WHERE id = ? AND receipt = ?",
    (now_us() + 30_000_000, message_id, receipt),
)

# 4. Send the result and delete the work item, in one transaction.
db.execute("BEGIN IMMEDIATE")
db.execute(
    "INSERT INTO bus_messages (queue, body, sent_at, visible_at) VALUES ('completed_research', ?, ?, ?)",
    ('{"result":1}', now_us(), now_us()),
)
db.execute("DELETE FROM bus_messages WHERE id = ? AND receipt = ?", (message_id, receipt))
db.execute("COMMIT")

# 5. Done: stop counting as a researcher.
db.execute("DELETE FROM bus_consumers WHERE id = ?", (consumer,))
