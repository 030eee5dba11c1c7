-- The shipped send without the NOTIFY.
SET synchronous_commit = off;
WITH sent AS (
    INSERT INTO bus_messages (queue, body) SELECT 'q', repeat('x', 200) FROM generate_series(1, :batch)
)
SELECT set_config('synchronous_commit', 'on', true);
