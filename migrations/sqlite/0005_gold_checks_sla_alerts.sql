-- Quality control beyond review, and the lead's watch over the queue: gold items with known
-- answers mixed into raters' work, training raters, spot checks of reviewers' decisions, SLA
-- escalation and alerts that are emailed to leads.

-- A gold item: an item whose right answer is known, served to raters as if it were an
-- ordinary item. Answers to it never count as labels; they measure the rater.
CREATE TABLE gold_items (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES annotation_tasks(id),
    answer      TEXT    NOT NULL CHECK (answer IN ('pass','fail')),
    note        TEXT    NOT NULL DEFAULT '',                     -- why this is the answer
    created_by  INTEGER REFERENCES users(id),
    created_at  INTEGER NOT NULL,
    retired_at  INTEGER,                                         -- no longer served when set
    CONSTRAINT gold_items_task_key UNIQUE (task_id)
);

-- A rater's answer to a gold item: once per rater and item. `training`: given while the rater
-- was in training (counted for graduation, shown with feedback).
CREATE TABLE gold_answers (
    id          INTEGER PRIMARY KEY,
    gold_id     INTEGER NOT NULL REFERENCES gold_items(id),
    rater_id    INTEGER NOT NULL REFERENCES users(id),
    correct     BOOLEAN NOT NULL,
    training    BOOLEAN NOT NULL,
    duration_ms INTEGER,
    created_at  INTEGER NOT NULL,
    CONSTRAINT gold_answers_rater_key UNIQUE (gold_id, rater_id)
);
CREATE INDEX gold_answers_rater_idx ON gold_answers (rater_id, created_at);

-- A lease on a gold item names it: it takes no slot of the task's overlap.
ALTER TABLE task_leases ADD COLUMN gold_id INTEGER REFERENCES gold_items(id);

-- Raters a lead sent to training get only gold items, with feedback, until they pass.
ALTER TABLE users ADD COLUMN training_since INTEGER;
-- Where alerts and invitations go (leads, and raters who have one).
ALTER TABLE users ADD COLUMN email TEXT;

-- A sample of reviewers' own decisions is checked by another senior: upheld or overturned
-- (with the verdict the checker gives). NULL: not drawn.
ALTER TABLE label_reviews ADD COLUMN check_state TEXT CHECK (check_state IN ('pending','upheld','overturned'));
ALTER TABLE label_reviews ADD COLUMN checked_by INTEGER REFERENCES users(id);
ALTER TABLE label_reviews ADD COLUMN check_verdict TEXT CHECK (check_verdict IN ('pass','fail'));
ALTER TABLE label_reviews ADD COLUMN check_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE label_reviews ADD COLUMN checked_at INTEGER;
CREATE INDEX label_reviews_check_idx ON label_reviews (check_state, id) WHERE check_state = 'pending';

-- Escalated tasks (senior raters take them first) and finished tasks by completion time (SLA
-- attainment by day, throughput for the forecast).
CREATE INDEX annotation_tasks_escalated_idx ON annotation_tasks (priority DESC, due_at, id)
    WHERE state = 'open' AND escalated_at IS NOT NULL;
CREATE INDEX annotation_tasks_completed_idx ON annotation_tasks (completed_at) WHERE state = 'done';

-- Alerts for leads: one open alert per (kind, subject); resolved when the condition clears;
-- emailed once.
CREATE TABLE alerts (
    id          INTEGER PRIMARY KEY,
    kind        TEXT    NOT NULL,                  -- sla_at_risk, sla_breached, low_agreement
    subject     TEXT    NOT NULL,                  -- what it is about (a queue's name)
    message     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    resolved_at INTEGER,
    emailed_at  INTEGER
);
CREATE UNIQUE INDEX alerts_open_key ON alerts (kind, subject) WHERE resolved_at IS NULL;

-- A rater's skips, for the claim's "not skipped by me" test without scanning by task.
CREATE INDEX annotation_skips_user_idx ON annotation_skips (user_id, task_id);
-- Velocity and inflow over the last day and week, read by the queue monitor every minute.
CREATE INDEX labels_created_idx ON labels (created_at);
CREATE INDEX annotation_tasks_created_idx ON annotation_tasks (created_at);
