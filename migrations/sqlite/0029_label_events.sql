-- The `label.completed` webhook: an item's human outcome is an event each time it is decided
-- (its last label came in and the raters agreed, a reviewer settled a split, a correction or
-- spot check changed it; a pair when its last preference came in). `decided_at` stamps the
-- latest decision, so receivers are sent each change once, in order, from one index.
ALTER TABLE annotation_tasks ADD COLUMN decided_at INTEGER;
-- Items decided before: pairs when complete, single items whose verdict humans gave.
UPDATE annotation_tasks SET decided_at = completed_at
    WHERE state = 'done' AND (kind = 'pair' OR work_item_id IN (
        SELECT id FROM work_items WHERE decided_by = 'human'));
CREATE INDEX annotation_tasks_decided_idx ON annotation_tasks (decided_at, id) WHERE decided_at IS NOT NULL;
