-- A judge may grade several answers in one call (domain/src/grading/batch.rs): how many is part
-- of the judge's version, like its rubric, so grades and cache keys name it.
ALTER TABLE judges ADD COLUMN batch_items BIGINT NOT NULL DEFAULT 1
    CHECK (batch_items BETWEEN 1 AND 16);
