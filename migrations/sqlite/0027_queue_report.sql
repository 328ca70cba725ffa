-- The lead's queue report over a million open tasks: it sums open tasks by serving slot
-- (priority, deadline) and queue instead of reading each one, so every input of that sum sits
-- in one covering index over the open tasks.
--
-- A task's run is copied onto it (its work item's run; for a pair, one of its two runs, which share
-- an eval): the
-- queue is the run's eval, and joining a million tasks to their items doubled the scan. It is a
-- copy, not a reference: tasks are deleted before their run, and a foreign key here would make
-- each run deletion scan the tasks.
ALTER TABLE annotation_tasks ADD COLUMN run_id INTEGER;
UPDATE annotation_tasks SET run_id = (SELECT w.run_id FROM work_items w WHERE w.id = annotation_tasks.work_item_id)
    WHERE work_item_id IS NOT NULL;
UPDATE annotation_tasks SET run_id = (
    SELECT w.run_id FROM preference_pairs p JOIN work_items w ON w.id = p.left_item_id
    WHERE p.task_id = annotation_tasks.id)
    WHERE work_item_id IS NULL;
-- Every task is given a deadline when it is made; none is left without one.
UPDATE annotation_tasks SET due_at = created_at + 48 * 3600 * 1000 WHERE due_at IS NULL;
CREATE INDEX annotation_tasks_open_report_idx ON annotation_tasks
    (priority DESC, due_at, run_id, created_at, labels_needed, labels_done, escalated_at)
    WHERE state = 'open';
