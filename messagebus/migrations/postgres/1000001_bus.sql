-- The database bus (design: messagebus/src/sql/mod.rs; the SQLite schema has the same shape).
-- Versions from 1000001 up: the datastore's migrations share `_sqlx_migrations` in the same
-- database, and each migrator ignores the other's.

-- One row: this bus instance's id. Receipts carry it, so a datastore settles a delivery in its
-- own transaction only when the bus lives in its database.
CREATE TABLE bus_instance (
    id TEXT NOT NULL
);
INSERT INTO bus_instance (id) VALUES (gen_random_uuid()::text);

CREATE TABLE bus_queues (
    name                  TEXT PRIMARY KEY,
    -- NULL for a dead-letter queue.
    dead_letter_queue     TEXT,
    visibility_timeout_ms BIGINT  NOT NULL,
    -- Receives after which a message is dead-lettered; 0: no limit.
    max_receives          INTEGER NOT NULL,
    created_at            TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE bus_messages (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue              TEXT        NOT NULL,
    body               TEXT        NOT NULL,
    sent_at            TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Waiting while in the past, in flight while in the future.
    visible_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    receive_count      INTEGER     NOT NULL DEFAULT 0,
    -- New at every receive; settling names it, so a stale delivery settles nothing.
    receipt            BIGINT      NOT NULL DEFAULT 0,
    dead_letter_reason TEXT
);
-- The claim walks this index from the oldest visible row and stops after LIMIT rows, however
-- many wait behind them.
CREATE INDEX bus_messages_next ON bus_messages (queue, visible_at, id);

CREATE SEQUENCE bus_receipts;

CREATE TABLE bus_consumers (
    id        UUID PRIMARY KEY,
    queue     TEXT        NOT NULL,
    last_seen TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX bus_consumers_queue ON bus_consumers (queue, last_seen);
