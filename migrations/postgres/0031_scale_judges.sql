-- Judges that score a rubric's ordinal dimension (domain/src/grading/scale.rs): the judge
-- version's scale (rubric version, dimension, points, pass point) as JSON, NULL for a PASS/FAIL
-- judge; each grade's point, expected score and distribution over the points; and each cached
-- judge call's reading, so a call answered from the cache gives the same score.
ALTER TABLE judges ADD COLUMN scale TEXT;
ALTER TABLE grades ADD COLUMN score TEXT;
ALTER TABLE grade_cache ADD COLUMN score TEXT;

-- A scale judge's calibration reads the rubric's tasks (few) before their grades.
CREATE INDEX annotation_tasks_rubric_idx ON annotation_tasks (rubric_id);
