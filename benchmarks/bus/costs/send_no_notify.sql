-- One send without the NOTIFY.
SET synchronous_commit = on;
BEGIN;
INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch);
COMMIT;
