-- Failed research (the contract's "Failed research"): a pair that cannot be researched for a
-- reason that will not pass is recorded with that reason instead of offsets. It has a row in
-- research_results like any recorded pair, so that lease selection (which counts
-- researched_count) never hands it out again; `failure` tells it from a success.
ALTER TABLE research_results ADD COLUMN failure TEXT;
-- Of the episode's recorded pairs (researched_count), those that failed: status reports
-- researched_count - failed_count as researched and failed_count as failed without reading
-- research_results.
ALTER TABLE episodes ADD COLUMN failed_count INTEGER NOT NULL DEFAULT 0;
-- Failures are few among results: index only them, by episode, by clip and by reason, for
-- retrying them, forgetting them when the media changes, and listing the common reasons.
CREATE INDEX research_results_failed_episode ON research_results (episode_id)
    WHERE failure IS NOT NULL;
CREATE INDEX research_results_failed_clip ON research_results (clip_id)
    WHERE failure IS NOT NULL;
CREATE INDEX research_results_failed_reason ON research_results (failure)
    WHERE failure IS NOT NULL;
-- An episode or clip curated again with another media_uri may be researchable now: its
-- failed pairs are forgotten in the upsert's own transaction (here rather than in the upsert
-- code, so that every way of changing the row does it). Costs nothing when the URI is kept.
CREATE TRIGGER episodes_media_uri_changed AFTER UPDATE OF media_uri ON episodes
WHEN old.media_uri IS NOT new.media_uri AND new.failed_count > 0
BEGIN
    DELETE FROM research_results WHERE episode_id = new.id AND failure IS NOT NULL;
    UPDATE episodes
    SET researched_count = researched_count - failed_count, failed_count = 0
    WHERE id = new.id;
END;
CREATE TRIGGER clips_media_uri_changed AFTER UPDATE OF media_uri ON clips
WHEN old.media_uri IS NOT new.media_uri
BEGIN
    UPDATE episodes
    SET researched_count = researched_count - 1, failed_count = failed_count - 1
    WHERE id IN (SELECT episode_id FROM research_results
                 WHERE clip_id = new.id AND failure IS NOT NULL);
    DELETE FROM research_results WHERE clip_id = new.id AND failure IS NOT NULL;
END;
