-- Human annotation at scale: overlap (several distinct raters per item), one lease per rater
-- and item slot, skills and priority routing, SLA deadlines, QC review of labels, and the
-- rater pool (skills, capacity, pause, deactivation).

-- The rater pool. A paused rater gets no new items; a deactivated account cannot sign in and
-- its sessions stop working.
ALTER TABLE users ADD COLUMN active BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE users ADD COLUMN paused BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE users ADD COLUMN skills TEXT NOT NULL DEFAULT '';          -- comma-separated tags
ALTER TABLE users ADD COLUMN weekly_capacity_hours REAL NOT NULL DEFAULT 0;

-- Each task needs `labels_needed` distinct raters (the overlap); `labels_done` counts the
-- labels that stand (rejected ones do not). Priority orders the queue; `skill` (NULL: anyone)
-- routes it; `due_at` is its SLA deadline.
ALTER TABLE annotation_tasks ADD COLUMN labels_needed INTEGER NOT NULL DEFAULT 1 CHECK (labels_needed >= 1);
ALTER TABLE annotation_tasks ADD COLUMN labels_done INTEGER NOT NULL DEFAULT 0 CHECK (labels_done >= 0);
ALTER TABLE annotation_tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 1;
ALTER TABLE annotation_tasks ADD COLUMN skill TEXT;
ALTER TABLE annotation_tasks ADD COLUMN due_at INTEGER;
-- Share of this task's labels drawn for a senior reviewer's QC.
ALTER TABLE annotation_tasks ADD COLUMN review_rate REAL NOT NULL DEFAULT 0.075 CHECK (review_rate >= 0 AND review_rate <= 1);
ALTER TABLE annotation_tasks ADD COLUMN escalated_at INTEGER;        -- raised when its SLA was at risk
UPDATE annotation_tasks SET labels_done = (SELECT COUNT(*) FROM labels l WHERE l.task_id = annotation_tasks.id);
UPDATE annotation_tasks SET due_at = created_at + 48 * 3600 * 1000;
-- The queue's order, for open tasks only. It replaces the (state, id) index, with which the
-- planner filtered on state and then sorted every open task for each claim.
DROP INDEX annotation_tasks_state_idx;
CREATE INDEX annotation_tasks_queue_idx ON annotation_tasks (priority DESC, due_at, id) WHERE state = 'open';

-- One lease per rater at a time (a rater works on one item), and per task at most
-- labels_needed - labels_done live leases: claims check both in their transaction.
CREATE TABLE task_leases (
    task_id    INTEGER NOT NULL REFERENCES annotation_tasks(id),
    rater_id   INTEGER NOT NULL REFERENCES users(id),
    started_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, rater_id),
    CONSTRAINT task_leases_rater_key UNIQUE (rater_id)
);
INSERT INTO task_leases (task_id, rater_id, started_at, expires_at)
    SELECT id, leased_by, created_at, lease_expires_at FROM annotation_tasks
    WHERE state = 'leased' AND leased_by IS NOT NULL AND lease_expires_at IS NOT NULL;
UPDATE annotation_tasks SET state = 'open', leased_by = NULL, lease_expires_at = NULL WHERE state = 'leased';

-- A label stands, or was rejected by a reviewer (and no longer counts). Review: NULL when the
-- label was not drawn for QC, else pending until a reviewer decides.
ALTER TABLE labels ADD COLUMN state TEXT NOT NULL DEFAULT 'standing' CHECK (state IN ('standing','rejected'));
ALTER TABLE labels ADD COLUMN duration_ms INTEGER;                   -- lease start to submission
ALTER TABLE labels ADD COLUMN review_state TEXT CHECK (review_state IN ('pending','accepted','corrected','rejected'));
CREATE INDEX labels_review_idx ON labels (review_state, id) WHERE review_state = 'pending';
CREATE INDEX labels_annotator_idx ON labels (annotator_id, created_at);

-- A senior reviewer's decision on a label: accept it, correct it (the reviewer's verdict
-- overrides the raters') or reject it with a reason (the item returns to the queue).
CREATE TABLE label_reviews (
    id           INTEGER PRIMARY KEY,
    label_id     INTEGER NOT NULL REFERENCES labels(id),
    reviewer_id  INTEGER NOT NULL REFERENCES users(id),
    decision     TEXT    NOT NULL CHECK (decision IN ('accepted','corrected','rejected')),
    verdict      TEXT    CHECK (verdict IN ('pass','fail')),         -- the correction
    reason       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    CONSTRAINT label_reviews_label_key UNIQUE (label_id)
);

-- Settings a lead changes in the UI (e.g. the rater quality threshold), as text by name.
CREATE TABLE settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
