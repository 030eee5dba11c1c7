-- Failed research is forgotten when its episode or clip is curated again with a different
-- media_uri (0004) or different content. archivist never sees the media's bytes, so "different
-- content" is the curator's word: a curation newer than the stored one (last_date_curated
-- later). The curators send an item again only when it changed (`curate feed`: a new enclosure
-- or title; `curate clips`: the file's bytes), so their newer curation means the media may
-- have changed; a curation delivered again carries the same date and changes nothing.
DROP TRIGGER episodes_media_uri_changed;
DROP TRIGGER clips_media_uri_changed;
CREATE TRIGGER episodes_curated_again AFTER UPDATE OF media_uri, last_date_curated ON episodes
WHEN new.failed_count > 0
     AND (old.media_uri IS NOT new.media_uri OR new.last_date_curated > old.last_date_curated)
BEGIN
    DELETE FROM research_results WHERE episode_id = new.id AND failure IS NOT NULL;
    UPDATE episodes
    SET researched_count = researched_count - failed_count, failed_count = 0
    WHERE id = new.id;
END;
CREATE TRIGGER clips_curated_again AFTER UPDATE OF media_uri, last_date_curated ON clips
WHEN old.media_uri IS NOT new.media_uri OR new.last_date_curated > old.last_date_curated
BEGIN
    UPDATE episodes
    SET researched_count = researched_count - 1, failed_count = failed_count - 1
    WHERE id IN (SELECT episode_id FROM research_results
                 WHERE clip_id = new.id AND failure IS NOT NULL);
    DELETE FROM research_results WHERE clip_id = new.id AND failure IS NOT NULL;
END;
