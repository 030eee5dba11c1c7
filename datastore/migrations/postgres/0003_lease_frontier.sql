-- Where lease selection starts its walk down the urgency index. Research goes in urgency
-- order, so once it is under way a growing prefix of episodes is fully researched; walking
-- past them at every selection made lease_next slower the further research went (and slower
-- still between vacuums, as every recorded batch leaves a dead index entry behind). The
-- frontier records the urgency key of the first episode not fully researched, as of a clip
-- count: while `clips` is the number of clips, every episode before the key has every pair
-- researched. A new clip changes the count and so voids it; an episode inserted or moved
-- before it voids it too (`clips` set NULL, by the upsert itself); research only ever moves
-- it forward. `generation` changes whenever an upsert adds or moves an episode with work left:
-- lease selection moves the frontier only if it is unchanged since it was read, so it never
-- steps over an episode it could not see.
CREATE TABLE lease_frontier (
    only_row             boolean     PRIMARY KEY DEFAULT true CHECK (only_row),
    generation           bigint      NOT NULL DEFAULT 0,
    clips                bigint,
    priority             integer,
    date_aired           timestamptz,
    initial_date_curated timestamptz,
    id                   bigint
);
-- An existing store starts without a frontier: the first selection walks from the top, as
-- before, and sets it.
INSERT INTO lease_frontier DEFAULT VALUES;
