-- Preference per dimension: a pair request may name a rubric (its newest version when sent);
-- raters then say which output is better on each of its dimensions, as well as overall. The
-- pair's task asks that rubric version (annotation_tasks.rubric_id), so raters read its
-- guidelines; a rater's choices per dimension are JSON by dimension key.
ALTER TABLE pair_requests ADD COLUMN rubric_id INTEGER REFERENCES rubrics(id);
ALTER TABLE preference_labels ADD COLUMN dimensions TEXT;
