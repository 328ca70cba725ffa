-- The key under which a finished run's answers and deterministic grades may be copied whole
-- into a new run (the manifest parts that decide each identity's request and deterministic
-- grade; see `Manifest::reuse_key`). NULL for runs frozen before it, and for runs whose
-- grading or contamination check must see every item.
ALTER TABLE runs ADD COLUMN reuse_key TEXT;
CREATE INDEX runs_reuse_idx ON runs (reuse_key, id) WHERE reuse_key IS NOT NULL;
