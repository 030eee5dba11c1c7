-- Failed research is forgotten when its episode or clip is curated again with a different
-- media_uri (0007) or different content. archivist never sees the media's bytes, so "different
-- content" is the curator's word: a curation newer than the stored one (last_date_curated
-- later). The curators send an item again only when it changed (`curate feed`: a new enclosure
-- or title; `curate clips`: the file's bytes), so their newer curation means the media may
-- have changed; a curation delivered again carries the same date and changes nothing.
DROP TRIGGER episodes_media_uri_changed ON episodes;
DROP TRIGGER clips_media_uri_changed ON clips;
CREATE TRIGGER episodes_curated_again AFTER UPDATE OF media_uri, last_date_curated ON episodes
    FOR EACH ROW WHEN (NEW.failed_count > 0
                       AND (OLD.media_uri IS DISTINCT FROM NEW.media_uri
                            OR NEW.last_date_curated > OLD.last_date_curated))
    EXECUTE FUNCTION archivist_forget_failures();
CREATE TRIGGER clips_curated_again AFTER UPDATE OF media_uri, last_date_curated ON clips
    FOR EACH ROW WHEN (OLD.media_uri IS DISTINCT FROM NEW.media_uri
                       OR NEW.last_date_curated > OLD.last_date_curated)
    EXECUTE FUNCTION archivist_forget_failures();
