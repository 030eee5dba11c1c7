-- A ceiling: skip-locked DELETE of the oldest visible (no visibility, no receipt, no count).
SET synchronous_commit = off;
DELETE FROM bus_messages WHERE id IN (
    SELECT id FROM bus_messages WHERE queue = 'q' AND visible_at <= now()
    ORDER BY visible_at, id LIMIT :batch FOR UPDATE SKIP LOCKED);
