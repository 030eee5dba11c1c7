-- One send as shipped: a durable insert of :batch rows and a NOTIFY.
SET synchronous_commit = on;
BEGIN;
INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch);
SELECT pg_notify('archivist_bus', 'q');
COMMIT;
