-- Each leased pair's lease exists, but the foreign key checking it cost a lookup and a lock
-- per pair: 50 per lease, about a third of lease_next. The code keeps the rule without it: a
-- lease and its pairs are inserted by one statement, pairs are deleted before (or without)
-- their lease, and a lease is deleted only once it holds none (held_pairs is exact, kept in
-- the same transactions; the concurrency tests check both in the tables).
ALTER TABLE leased_pairs DROP CONSTRAINT leased_pairs_lease_id_fkey;
