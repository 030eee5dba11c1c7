-- Browsing the archive (`/clips`, `/episodes`): titles searched by word through FTS5 tables
-- kept by triggers. External content (the titles live in episodes and clips only): the FTS
-- table holds just its index. unicode61 folds case and diacritics, as a person's search expects.
CREATE VIRTUAL TABLE episodes_title_words USING fts5(
    title, content = 'episodes', content_rowid = 'id', tokenize = 'unicode61'
);
CREATE VIRTUAL TABLE clips_title_words USING fts5(
    title, content = 'clips', content_rowid = 'id', tokenize = 'unicode61'
);
-- Titles are identities, so upserts never change them; rows are never deleted. The UPDATE
-- triggers are there for a program that changes a title by hand.
CREATE TRIGGER episodes_title_words_insert AFTER INSERT ON episodes BEGIN
    INSERT INTO episodes_title_words (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER episodes_title_words_update AFTER UPDATE OF title ON episodes BEGIN
    INSERT INTO episodes_title_words (episodes_title_words, rowid, title)
        VALUES ('delete', old.id, old.title);
    INSERT INTO episodes_title_words (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER episodes_title_words_delete AFTER DELETE ON episodes BEGIN
    INSERT INTO episodes_title_words (episodes_title_words, rowid, title)
        VALUES ('delete', old.id, old.title);
END;
CREATE TRIGGER clips_title_words_insert AFTER INSERT ON clips BEGIN
    INSERT INTO clips_title_words (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER clips_title_words_update AFTER UPDATE OF title ON clips BEGIN
    INSERT INTO clips_title_words (clips_title_words, rowid, title)
        VALUES ('delete', old.id, old.title);
    INSERT INTO clips_title_words (rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER clips_title_words_delete AFTER DELETE ON clips BEGIN
    INSERT INTO clips_title_words (clips_title_words, rowid, title)
        VALUES ('delete', old.id, old.title);
END;
-- A store migrated with rows in place: index them.
INSERT INTO episodes_title_words (episodes_title_words) VALUES ('rebuild');
INSERT INTO clips_title_words (clips_title_words) VALUES ('rebuild');
-- The episode listing's order, newest aired first.
CREATE INDEX episodes_aired ON episodes (date_aired DESC, id DESC);
