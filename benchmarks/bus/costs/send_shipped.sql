-- One send as shipped (messagebus/src/sql/postgres.rs): the rows in one statement, its own
-- transaction, made durable by set_config(…, true) on a session that is not (the bus's
-- connections settle without waiting for the sync); then the NOTIFY in a transaction of its
-- own, which waits for no sync.
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT set_config('synchronous_commit', 'on', true);
SELECT pg_notify('archivist_bus', 'q');
