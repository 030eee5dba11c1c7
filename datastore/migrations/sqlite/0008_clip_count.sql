-- How many clips there are, kept by triggers: every lease selection and every recorded batch
-- compares an episode's researched count with it, and COUNT(*) over clips reads every row
-- (5,000 at the large size). An upsert that updates an existing clip fires no insert trigger.
CREATE TABLE clip_count (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    n        INTEGER NOT NULL
);
INSERT INTO clip_count (only_row, n) SELECT 1, COUNT(*) FROM clips;

CREATE TRIGGER clip_count_inserted AFTER INSERT ON clips
BEGIN
    UPDATE clip_count SET n = n + 1;
END;

CREATE TRIGGER clip_count_deleted AFTER DELETE ON clips
BEGIN
    UPDATE clip_count SET n = n - 1;
END;
