-- The status page lists the most recently researched matches: this index hands them out
-- newest first without sorting every match. Partial, so that it costs a write only for the
-- results that matched.
CREATE INDEX research_results_matched_recent
    ON research_results (research_date) WHERE matched;
-- Built inside the migration's transaction: CREATE INDEX CONCURRENTLY waits for every
-- transaction with an older snapshot, and a second `migrate` waiting on the migrator's
-- advisory lock holds one, so concurrent migrations would wait for each other forever.
-- On a large archive, expect recording to wait while this index builds (minutes).
