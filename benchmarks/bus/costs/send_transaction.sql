-- One send as it was first: a transaction of its own (BEGIN, SET LOCAL, INSERT, NOTIFY,
-- COMMIT: five round trips). The session is not durable, like the bus's connections.
SET synchronous_commit = off;
BEGIN;
SET LOCAL synchronous_commit = on;
INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch);
SELECT pg_notify('archivist_bus', 'q');
COMMIT;
