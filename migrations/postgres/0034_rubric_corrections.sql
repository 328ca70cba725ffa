-- A reviewer may correct a rubric label dimension by dimension: their answers (JSON by
-- dimension key, checked against the item's rubric) replace the raters' consensus on every
-- dimension they answer; `verdict` holds the verdict those answers give.
ALTER TABLE label_reviews ADD COLUMN answers TEXT;
