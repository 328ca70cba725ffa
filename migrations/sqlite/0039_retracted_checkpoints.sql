-- A checkpoint rolled back (a bad conversion, a training bug): retracted with a reason, by
-- whom and when. Its queued and running runs are cancelled and stay so, it leaves trends
-- and is never a baseline, and its results stay readable, marked retracted.
ALTER TABLE checkpoints ADD COLUMN retracted_at INTEGER;
ALTER TABLE checkpoints ADD COLUMN retracted_reason TEXT;
ALTER TABLE checkpoints ADD COLUMN retracted_by INTEGER REFERENCES users(id);
