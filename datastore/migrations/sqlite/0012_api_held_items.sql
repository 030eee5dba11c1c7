-- The API gateway, holding against its own participants: a revoked token is kept (marked, no
-- longer usable) so that the logs can name it when it keeps trying; each token carries the most
-- researchers it counts as; and every work item a researcher holds through the API is kept by
-- the hash of its receipt (never the receipt), bound to the token that took it, with what it
-- names, so that results are checked against it and a revoked token's items are given back.
ALTER TABLE api_tokens ADD COLUMN revoked_at INTEGER;
ALTER TABLE api_tokens ADD COLUMN max_researchers INTEGER NOT NULL DEFAULT 8;

CREATE TABLE api_held_items (
    receipt_hash TEXT PRIMARY KEY,
    token_name TEXT NOT NULL,
    bus_receipt TEXT,
    item TEXT NOT NULL,
    seen_at INTEGER NOT NULL
);
CREATE INDEX api_held_items_token ON api_held_items (token_name);
CREATE INDEX api_held_items_seen_at ON api_held_items (seen_at);
