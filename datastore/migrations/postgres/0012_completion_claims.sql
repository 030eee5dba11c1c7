-- Announcing on a bus outside the database (SQS, RabbitMQ, the database bus in another
-- database) sends each completion and then deletes it; two completed-research archivists at
-- once would both read and send the same rows. Each announcer first claims the rows it sends:
-- a claim holds a completion until `claimed_until` (NULL: nobody holds it), so the others skip
-- it, and one that stopped before letting go has its completions announced by the next after
-- that time. Completing the episode again clears the claim: the newer completion is anyone's.
ALTER TABLE episode_completions ADD COLUMN claimed_until timestamptz;
