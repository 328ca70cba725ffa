-- Retention: when a run's raw answers and logprobs were removed (its verdicts, tallies and
-- snapshot stay until the run itself expires).
ALTER TABLE runs ADD COLUMN raw_purged_at BIGINT;

-- Deleting a run's answers checks these references row by row (foreign keys, and the check
-- for newer runs reading an old answer through the cache): index them so it is a lookup.
CREATE INDEX generations_source_idx ON generations (source_work_item_id) WHERE source_work_item_id IS NOT NULL;
CREATE INDEX generation_cache_item_idx ON generation_cache (work_item_id);
