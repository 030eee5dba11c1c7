-- The status page lists the most recently researched matches: this index hands them out
-- newest first without sorting every match. Partial, so that it costs a write only for the
-- results that matched.
CREATE INDEX research_results_matched_recent
    ON research_results (research_date) WHERE matched;
