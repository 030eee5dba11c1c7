-- A lease keeps the length it was created with: a renewal extends it by that length, whatever
-- the renewing process's ARCHIVIST_LEASE_DURATION (a 20 s lease must not become 2 h).
ALTER TABLE leases ADD COLUMN duration interval;
-- Leases made before this: the time from creation to expiry is their length (exact unless
-- they were renewed, then longer).
UPDATE leases SET duration = expires_at - created_at;
ALTER TABLE leases ALTER COLUMN duration SET NOT NULL;
