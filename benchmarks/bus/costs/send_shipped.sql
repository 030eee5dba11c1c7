-- One send as shipped: one statement, its own transaction, made durable by set_config(…, true)
-- on a session that is not (the bus's connections settle without waiting for the sync).
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT set_config('synchronous_commit', 'on', true), pg_notify('archivist_bus', 'q');
