-- The database bus (design: messagebus/src/sql/mod.rs; the Postgres schema has the same shape).
-- Versions from 1000001 up: the datastore's migrations share `_sqlx_migrations` in the same
-- database, and each migrator ignores the other's. Times are INTEGER unix microseconds (UTC).

-- One row: this bus instance's id. Receipts carry it, so a datastore settles a delivery in its
-- own transaction only when the bus lives in its database.
CREATE TABLE bus_instance (
    id TEXT NOT NULL
);
INSERT INTO bus_instance (id) VALUES (lower(hex(randomblob(16))));

CREATE TABLE bus_queues (
    name                  TEXT PRIMARY KEY,
    -- NULL for a dead-letter queue.
    dead_letter_queue     TEXT,
    visibility_timeout_ms INTEGER NOT NULL,
    -- Receives after which a message is dead-lettered; 0: no limit.
    max_receives          INTEGER NOT NULL,
    created_at            INTEGER NOT NULL
);

CREATE TABLE bus_messages (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    queue              TEXT    NOT NULL,
    body               TEXT    NOT NULL,
    sent_at            INTEGER NOT NULL,
    -- Waiting while in the past, in flight while in the future.
    visible_at         INTEGER NOT NULL,
    receive_count      INTEGER NOT NULL DEFAULT 0,
    -- New at every receive (random()); settling names it, so a stale delivery settles nothing.
    receipt            INTEGER NOT NULL DEFAULT 0,
    dead_letter_reason TEXT
);
CREATE INDEX bus_messages_next ON bus_messages (queue, visible_at, id);

CREATE TABLE bus_consumers (
    id        TEXT PRIMARY KEY,
    queue     TEXT    NOT NULL,
    last_seen INTEGER NOT NULL
);
CREATE INDEX bus_consumers_queue ON bus_consumers (queue, last_seen);
