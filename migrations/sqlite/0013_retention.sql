-- Retention: when a run's raw answers and logprobs were removed (its verdicts, tallies and
-- snapshot stay until the run itself expires).
ALTER TABLE runs ADD COLUMN raw_purged_at INTEGER;
