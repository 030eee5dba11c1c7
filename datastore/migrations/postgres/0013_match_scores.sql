-- How sure the analyser is of each occurrence: one score from 0 to 1 per offset, in the order of
-- `clip_offsets_ns`. NULL when the analyser gave none (and on every row recorded before).
ALTER TABLE research_results ADD COLUMN clip_match_scores float8[];
