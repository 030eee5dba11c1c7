-- How findable a clip is (issue 46): the level above its background, in dB, from which the
-- reference analyser finds it, predicted from the clip alone by the researcher that looked for
-- it (`clip_findable_from_db` of a result). 127: not found even at the loudest level tried.
-- NULL: not predicted (no result carried it yet; every clip recorded before).
ALTER TABLE clips ADD COLUMN findable_from_db INTEGER;
