-- no-transaction
-- The status page lists the most recently researched matches: this index hands them out
-- newest first without sorting every match. Partial, so that it costs a write only for the
-- results that matched. Built CONCURRENTLY (so outside a transaction, one statement alone):
-- on a large archive the build takes minutes, and recording must not wait for it. Should a
-- build be cut off, the index is left INVALID and this is not retried: `DROP INDEX
-- research_results_matched_recent` and `archivist migrate` again.
CREATE INDEX CONCURRENTLY IF NOT EXISTS research_results_matched_recent
    ON research_results (research_date) WHERE matched;
