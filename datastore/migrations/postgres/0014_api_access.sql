-- The API gateway (`archivist serve --api`): its tokens, only a hash of each (SHA-256 as hex),
-- and who is there: remote researchers (one each) and each gateway's own receivers on the
-- work-item queue (which the bus counts as consumers), so that any archivist counts remote
-- researchers once.
CREATE TABLE api_tokens (
    name TEXT PRIMARY KEY,
    scope TEXT NOT NULL CHECK (scope IN ('curator', 'researcher', 'reader')),
    token_hash TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ
);

CREATE TABLE api_presence (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('researcher', 'gateway')),
    count BIGINT NOT NULL,
    seen_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX api_presence_seen_at ON api_presence (seen_at);
