-- Browsing the archive (`/clips`, `/episodes`): titles searched by word, with the full-text
-- search Postgres has built in. pg_trgm would also find parts of words, but it is an extension:
-- a managed Postgres may allow it only to some roles, and the archivist's role must be able to
-- migrate on its own. The 'simple' configuration lower-cases and keeps every word (no
-- stemming, no stop words), as a title search by a person expects.
CREATE INDEX episodes_title_words ON episodes USING gin (to_tsvector('simple', title));
CREATE INDEX clips_title_words ON clips USING gin (to_tsvector('simple', title));
-- The episode listing's order, newest aired first, read from an index instead of sorted at
-- every page. Neither column is ever updated, so counter updates stay HOT (0005).
CREATE INDEX episodes_aired ON episodes (date_aired DESC, id DESC);
