-- A receiver's heartbeat row (the keeper refreshes every live receiver every 10 s).
SET synchronous_commit = off;
\set c random(1, 64)
INSERT INTO bus_consumers (id, queue, last_seen)
VALUES (('00000000-0000-0000-0000-' || lpad(:c::text, 12, '0'))::uuid, 'q', now())
ON CONFLICT (id) DO UPDATE SET last_seen = now();
