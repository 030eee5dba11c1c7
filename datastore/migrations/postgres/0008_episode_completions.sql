-- Episodes fully researched and not announced yet (the contract's EpisodeResearched, sent to
-- ARCHIVIST_ANNOUNCE_QUEUE). The transaction that records an episode's last pair (every clip
-- known then researched or failed: researched_count reaches the clip count) keeps a row here;
-- the announcer publishes it and deletes it. An outbox rather than a publish inside recording,
-- so that recording never waits on a bus that is not the database's own, and a completion
-- recorded is announced even when the process stops right after the commit.
--
-- One row per episode at most (announcing off, the table holds the completed episodes and no
-- more): an episode that completes again before its row is announced bumps `completions`, and
-- the announcer deletes only the row it read, so the newer completion is announced as well.
CREATE TABLE episode_completions (
    episode_id   bigint      PRIMARY KEY,
    completed_at timestamptz NOT NULL,
    completions  bigint      NOT NULL DEFAULT 1
);
CREATE INDEX episode_completions_order ON episode_completions (completed_at, episode_id);
