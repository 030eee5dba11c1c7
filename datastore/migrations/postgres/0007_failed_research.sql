-- Failed research (the contract's "Failed research"): a pair that cannot be researched for a
-- reason that will not pass is recorded with that reason instead of offsets. It has a row in
-- research_results like any recorded pair, so that lease selection (which counts
-- researched_count) never hands it out again; `failure` tells it from a success. Both columns
-- are added without rewriting the tables (a NULL column; a constant default).
ALTER TABLE research_results ADD COLUMN failure text;
-- Of the episode's recorded pairs (researched_count), those that failed: status reports
-- researched_count - failed_count as researched and failed_count as failed without reading
-- research_results.
ALTER TABLE episodes ADD COLUMN failed_count integer NOT NULL DEFAULT 0;
-- Failures are few among results: index only them, by episode, by clip and by reason, for
-- retrying them, forgetting them when the media changes, and listing the common reasons.
CREATE INDEX research_results_failed_episode ON research_results (episode_id)
    WHERE failure IS NOT NULL;
CREATE INDEX research_results_failed_clip ON research_results (clip_id)
    WHERE failure IS NOT NULL;
CREATE INDEX research_results_failed_reason ON research_results (failure)
    WHERE failure IS NOT NULL;

-- An episode or clip curated again with another media_uri may be researchable now: its failed
-- pairs are forgotten in the upsert's own transaction (a trigger, so that every way of changing
-- the row does it). AFTER ROW triggers run once the upsert statement is done, so the lease
-- frontier the upsert moved is voided after it. Costs nothing when the URI is kept.
CREATE FUNCTION archivist_forget_failures() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    gone integer := 0;
BEGIN
    IF TG_TABLE_NAME = 'episodes' THEN
        IF NEW.failed_count = 0 THEN
            RETURN NULL;
        END IF;
        WITH d AS (DELETE FROM research_results
                   WHERE episode_id = NEW.id AND failure IS NOT NULL RETURNING 1)
        SELECT count(*) INTO gone FROM d;
        UPDATE episodes
        SET researched_count = researched_count - gone, failed_count = failed_count - gone
        WHERE id = NEW.id;
    ELSE
        -- Episodes first, in id order: the order recording locks them in.
        PERFORM 1 FROM episodes
        WHERE id IN (SELECT episode_id FROM research_results
                     WHERE clip_id = NEW.id AND failure IS NOT NULL)
        ORDER BY id FOR NO KEY UPDATE;
        WITH d AS (DELETE FROM research_results
                   WHERE clip_id = NEW.id AND failure IS NOT NULL RETURNING episode_id)
        UPDATE episodes e
        SET researched_count = e.researched_count - 1, failed_count = e.failed_count - 1
        FROM d WHERE e.id = d.episode_id;
        GET DIAGNOSTICS gone = ROW_COUNT;
    END IF;
    IF gone > 0 THEN
        -- Episodes before the frontier may have work again (0003).
        UPDATE lease_frontier SET clips = NULL, generation = generation + 1;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER episodes_media_uri_changed AFTER UPDATE OF media_uri ON episodes
    FOR EACH ROW WHEN (OLD.media_uri IS DISTINCT FROM NEW.media_uri)
    EXECUTE FUNCTION archivist_forget_failures();
CREATE TRIGGER clips_media_uri_changed AFTER UPDATE OF media_uri ON clips
    FOR EACH ROW WHEN (OLD.media_uri IS DISTINCT FROM NEW.media_uri)
    EXECUTE FUNCTION archivist_forget_failures();
