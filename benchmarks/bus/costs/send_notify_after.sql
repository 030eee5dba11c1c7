-- The NOTIFY in a transaction of its own after the durable one (no sync at its commit), so
-- that the durable commit does not hold the cluster-wide notification lock while it syncs.
SET synchronous_commit = on;
BEGIN;
INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch);
COMMIT;
SET synchronous_commit = off;
SELECT pg_notify('archivist_bus', 'q');
