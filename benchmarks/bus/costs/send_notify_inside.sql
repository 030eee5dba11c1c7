-- The NOTIFY inside the durable statement: its commit holds the cluster-wide notification
-- lock through the WAL flush, so concurrent senders flush one after another.
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT set_config('synchronous_commit', 'on', true), pg_notify('archivist_bus', 'q');
