-- Browsing the archive (`/clips`, `/episodes`): titles searched by word, with the full-text
-- search Postgres has built in. pg_trgm would also find parts of words, but it is an extension:
-- a managed Postgres may allow it only to some roles, and the archivist's role must be able to
-- migrate on its own. The 'simple' configuration lower-cases and keeps every word (no
-- stemming, no stop words), as a title search by a person expects. Punctuation is made space
-- first: the parser would otherwise read `<b>`, `a@b.com` or `/x/y.mp3` as one tag, address or
-- path token and drop or keep it whole, while a search splits on it (and SQLite's FTS5 does).
-- The queries repeat this expression exactly (PgDataStore's TITLE_WORDS), so that it is used.
CREATE INDEX episodes_title_words ON episodes
    USING gin (to_tsvector('simple', regexp_replace(title, '[[:punct:]]+', ' ', 'g')));
CREATE INDEX clips_title_words ON clips
    USING gin (to_tsvector('simple', regexp_replace(title, '[[:punct:]]+', ' ', 'g')));
-- The episode listing's order, newest aired first, read from an index instead of sorted at
-- every page. Neither column is ever updated, so counter updates stay HOT (0005).
CREATE INDEX episodes_aired ON episodes (date_aired DESC, id DESC);
