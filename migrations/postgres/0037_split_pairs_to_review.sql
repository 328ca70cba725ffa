-- Pairs whose raters split before reviewers settled splits (0033) were stamped decided with a
-- split; they now wait for a reviewer like any split pair.
UPDATE preference_labels SET review_state = 'pending'
WHERE state = 'standing' AND review_state IS NULL AND task_id IN (
    SELECT id FROM annotation_tasks WHERE kind = 'pair' AND state = 'done' AND consensus LIKE '%"split"%');
UPDATE annotation_tasks SET decided_at = NULL
WHERE kind = 'pair' AND state = 'done' AND consensus LIKE '%"split"%';
