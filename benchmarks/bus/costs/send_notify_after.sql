-- The NOTIFY in a transaction of its own after the durable send (no sync at its commit), so
-- that the durable commit does not hold the cluster-wide notification lock while it syncs.
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT set_config('synchronous_commit', 'on', true);
SELECT pg_notify('archivist_bus', 'q');
