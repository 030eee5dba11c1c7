-- The shipped send without set_config: commits that do not wait for the sync. The control
-- that shows the shipped one does.
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT 1;
SELECT pg_notify('archivist_bus', 'q');
