-- When every identity of a run was written (its expansion ran to the end, or a finished run's
-- were copied). A run stopped while it expanded (cancelled, or paused by a serving canary's
-- hold) after its launch died part-way has none: resuming or relaunching it plans the rest
-- first, since it could never complete otherwise. Runs before this column are counted once.
ALTER TABLE runs ADD COLUMN planned_in_full_at BIGINT;
UPDATE runs SET planned_in_full_at = COALESCE(planned_at, created_at)
WHERE (SELECT COUNT(*) FROM work_items w WHERE w.run_id = runs.id) >= expected_count;
