-- Recording a batch updates its episodes' counters. While researched_count rode along in the
-- urgency index (0001, so that selection could skip researched episodes from the index
-- alone), no such update could be HOT: each one added an entry to every index of the table,
-- and lease selection walked past the dead ones until vacuum came by. Since the lease
-- frontier (0003) the walk is short, so a visit to the table per episode costs little, and
-- counter updates no longer touch any index. Free space on each page (fillfactor) gives the
-- new row versions room beside the old; a store migrated with rows in place gains it as
-- pages are rewritten.
DROP INDEX episodes_urgency;
CREATE INDEX episodes_urgency
    ON episodes (priority DESC, date_aired DESC, initial_date_curated DESC, id DESC);
ALTER TABLE episodes SET (fillfactor = 50);
