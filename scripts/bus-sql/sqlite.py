#!/usr/bin/env python3
"""A researcher in another language on the SQLite database bus: the SQL the book documents
("The database bus from other languages"), read out of docs/src/buses.md and run from Python's
sqlite3. Tested by messagebus/tests/sql_sqlite.rs. Usage: sqlite.py PATH_TO_FILE"""
import os
import sqlite3
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from book_sql import statements  # noqa: E402

sql = statements("sqlite")
db = sqlite3.connect(sys.argv[1], timeout=10, isolation_level=None)
db.execute("PRAGMA journal_mode = WAL")
consumer = str(uuid.uuid4())

# 1. Count as a researcher (repeat every few seconds while running).
db.execute(sql["heartbeat"], (consumer,))

# 2. Receive one work item.
db.execute("BEGIN IMMEDIATE")
row = db.execute(sql["receive"]).fetchone()
db.execute("COMMIT")
if row is None:
    sys.exit("no work")
message_id, receipt, body = row
print(f"received {body}")

# 3. Long work: extend the visibility.
db.execute(sql["extend"], (message_id, receipt))

# 4. Send the result and delete the work item, in one transaction.
db.execute("BEGIN IMMEDIATE")
db.execute(sql["send"], ('{"result":1}',))
db.execute(sql["delete"], (message_id, receipt))
db.execute("COMMIT")

# 5. Done: stop counting as a researcher.
db.execute(sql["leave"], (consumer,))
