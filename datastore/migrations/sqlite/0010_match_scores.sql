-- How sure the analyser is of each occurrence: a JSON array of scores from 0 to 1, one per
-- offset, in the order of `clip_offsets_ns`. NULL when the analyser gave none (and on every row
-- recorded before).
ALTER TABLE research_results ADD COLUMN clip_match_scores TEXT;
