-- The archivist schema for SQLite (design: datastore/src/lib.rs; the Postgres schema has the same shape).
-- Research pairs are implied by episodes x clips: only leased and researched pairs have rows.
-- Times are INTEGER unix microseconds (UTC): they sort and compare cheaply.

CREATE TABLE episodes (
    id                   INTEGER PRIMARY KEY,
    title                TEXT    NOT NULL,
    date_aired           INTEGER NOT NULL,
    initial_date_curated INTEGER NOT NULL,
    last_date_curated    INTEGER NOT NULL,
    curator_information  TEXT    NOT NULL,
    description          TEXT    NOT NULL,
    media_uri            TEXT    NOT NULL UNIQUE,
    media_type           TEXT    NOT NULL,
    priority             INTEGER NOT NULL,
    -- Clips with a recorded result for this episode, and of those the results with offsets:
    -- kept by record_results so that selection and status never count research_results.
    researched_count     INTEGER NOT NULL DEFAULT 0,
    matched_count        INTEGER NOT NULL DEFAULT 0,
    UNIQUE (title, date_aired)
);
-- The work-assignment order: lease_next walks it and stops at the first episode with free pairs.
-- researched_count rides along so fully researched episodes are skipped without a table read
-- (1.7 ms instead of 6 ms to skip 19,000 of them).
CREATE INDEX episodes_urgency
    ON episodes (priority DESC, date_aired DESC, initial_date_curated DESC, id DESC, researched_count);

CREATE TABLE clips (
    id                   INTEGER PRIMARY KEY,
    title                TEXT    NOT NULL UNIQUE,
    initial_date_curated INTEGER NOT NULL,
    last_date_curated    INTEGER NOT NULL,
    curator_information  TEXT    NOT NULL,
    description          TEXT    NOT NULL,
    media_uri            TEXT    NOT NULL UNIQUE,
    media_type           TEXT    NOT NULL,
    priority             INTEGER NOT NULL
);
CREATE INDEX clips_urgency ON clips (priority DESC, initial_date_curated DESC, id DESC);

CREATE TABLE leases (
    id          BLOB    PRIMARY KEY,  -- UUID, 16 bytes
    episode_id  INTEGER NOT NULL REFERENCES episodes (id),
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    -- Rows this lease has in leased_pairs, kept exact in the transactions that change them.
    held_pairs  INTEGER NOT NULL,
    -- 1 once the researcher sent its last result while others may still be on their way (the
    -- bus does not keep order): the lease keeps its remaining pairs, is no longer renewed, and
    -- is deleted when its last held pair is recorded (or its pairs are taken over after expiry).
    revoked     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX leases_episode ON leases (episode_id, expires_at);

-- The primary key is the proof that no pair is held by two leases.
CREATE TABLE leased_pairs (
    episode_id INTEGER NOT NULL,
    clip_id    INTEGER NOT NULL,
    lease_id   BLOB    NOT NULL REFERENCES leases (id) ON DELETE CASCADE,
    PRIMARY KEY (episode_id, clip_id)
) WITHOUT ROWID;
CREATE INDEX leased_pairs_lease ON leased_pairs (lease_id);

CREATE TABLE research_results (
    episode_id          INTEGER NOT NULL,
    clip_id             INTEGER NOT NULL,
    lease_id            BLOB    NOT NULL,
    research_date       INTEGER NOT NULL,
    episode_duration_ns INTEGER NOT NULL,
    episode_hash        TEXT    NOT NULL,
    clip_duration_ns    INTEGER NOT NULL,
    clip_hash           TEXT    NOT NULL,
    clip_offsets_ns     TEXT    NOT NULL,  -- JSON array of integers
    matched             INTEGER NOT NULL,  -- 1 when clip_offsets_ns is not empty
    PRIMARY KEY (episode_id, clip_id)
) WITHOUT ROWID;
-- Matches are few among results: index only them, from either side.
CREATE INDEX research_results_matched_clip ON research_results (clip_id) WHERE matched = 1;
CREATE INDEX research_results_matched_episode ON research_results (episode_id) WHERE matched = 1;
