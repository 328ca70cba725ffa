-- Side-by-side preference: a researcher sends pairs of outputs (the same case answered by two
-- runs) to raters, who say which is better. A pair is an annotation task of kind `pair`, so
-- claims, overlap, skips, priorities, SLAs and escalation treat it as any item; it has no
-- single work item, and its two sides are in `preference_pairs`.
--
-- SQLite cannot drop a NOT NULL or change a CHECK in place, so `annotation_tasks` is rebuilt
-- the way 0019 rebuilt `work_items`: foreign keys are off (the store migrates on a connection
-- of its own that way), the old table is renamed aside, the new one created under the old
-- name with the same ids, the old one dropped, its indexes created again, and every reference
-- into it checked at the end.
PRAGMA legacy_alter_table = ON;
ALTER TABLE annotation_tasks RENAME TO annotation_tasks_before_pairs;

CREATE TABLE annotation_tasks (
    id               INTEGER PRIMARY KEY,
    -- The item under judgement; NULL for a pair (its two items are in preference_pairs).
    work_item_id     INTEGER REFERENCES work_items(id),
    reason           TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('open','leased','done')),
    leased_by        INTEGER REFERENCES users(id),
    lease_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    kind             TEXT    NOT NULL DEFAULT 'escalation' CHECK (kind IN ('escalation','audit','pair')),
    sampling_rate    REAL    NOT NULL DEFAULT 1 CHECK (sampling_rate > 0 AND sampling_rate <= 1),
    labels_needed    INTEGER NOT NULL DEFAULT 1 CHECK (labels_needed >= 1),
    labels_done      INTEGER NOT NULL DEFAULT 0 CHECK (labels_done >= 0),
    priority         INTEGER NOT NULL DEFAULT 1,
    skill            TEXT,
    due_at           INTEGER,
    review_rate      REAL    NOT NULL DEFAULT 0.075 CHECK (review_rate >= 0 AND review_rate <= 1),
    escalated_at     INTEGER,
    rubric_id        INTEGER REFERENCES rubrics(id),
    consensus        TEXT,
    CONSTRAINT annotation_tasks_work_item_key UNIQUE (work_item_id),
    CONSTRAINT annotation_tasks_pair_check CHECK ((kind = 'pair') = (work_item_id IS NULL))
);
INSERT INTO annotation_tasks (id, work_item_id, reason, state, leased_by, lease_expires_at, created_at,
    completed_at, kind, sampling_rate, labels_needed, labels_done, priority, skill, due_at, review_rate,
    escalated_at, rubric_id, consensus)
SELECT id, work_item_id, reason, state, leased_by, lease_expires_at, created_at,
    completed_at, kind, sampling_rate, labels_needed, labels_done, priority, skill, due_at, review_rate,
    escalated_at, rubric_id, consensus
FROM annotation_tasks_before_pairs;
DROP TABLE annotation_tasks_before_pairs;

CREATE INDEX annotation_tasks_queue_idx ON annotation_tasks (priority DESC, due_at, id) WHERE state = 'open';
CREATE INDEX annotation_tasks_escalated_idx ON annotation_tasks (priority DESC, due_at, id)
    WHERE state = 'open' AND escalated_at IS NOT NULL;
CREATE INDEX annotation_tasks_completed_idx ON annotation_tasks (completed_at) WHERE state = 'done';
CREATE INDEX annotation_tasks_created_idx ON annotation_tasks (created_at);

PRAGMA legacy_alter_table = OFF;

CREATE TEMP TABLE annotation_tasks_rebuild_check (broken INTEGER CHECK (broken = 0));
INSERT INTO annotation_tasks_rebuild_check
    SELECT 1 FROM (
        SELECT parent FROM pragma_foreign_key_check('labels')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('annotation_skips')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('task_leases')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('gold_items')
    ) WHERE parent = 'annotation_tasks' LIMIT 1;
DROP TABLE annotation_tasks_rebuild_check;

-- What a researcher sent from the Compare page: pairs of run A's and run B's answers to the
-- same cases, chosen by `selection` (`differ`: the verdicts differ; `unsure`: a judge was
-- unsure or a human decided either side; `random`: a uniform sample), drawn with `seed`.
CREATE TABLE pair_requests (
    id            INTEGER PRIMARY KEY,
    run_a         INTEGER NOT NULL REFERENCES runs(id),
    run_b         INTEGER NOT NULL REFERENCES runs(id),
    selection     TEXT    NOT NULL CHECK (selection IN ('differ','unsure','random')),
    pairs         INTEGER NOT NULL CHECK (pairs >= 1),
    labels_needed INTEGER NOT NULL CHECK (labels_needed >= 1),
    seed          INTEGER NOT NULL,
    note          TEXT    NOT NULL DEFAULT '',
    requested_by  INTEGER NOT NULL REFERENCES users(id),
    created_at    INTEGER NOT NULL,
    CHECK (run_a <> run_b)
);

-- A pair's two sides as raters see them: the left output is shown as A, the right as B.
-- Which run is on the left is drawn per pair and recorded here.
CREATE TABLE preference_pairs (
    task_id       INTEGER PRIMARY KEY REFERENCES annotation_tasks(id),
    request_id    INTEGER NOT NULL REFERENCES pair_requests(id),
    left_item_id  INTEGER NOT NULL REFERENCES work_items(id),
    right_item_id INTEGER NOT NULL REFERENCES work_items(id),
    CHECK (left_item_id <> right_item_id)
);
CREATE INDEX preference_pairs_request_idx ON preference_pairs (request_id, task_id);
-- Two items are paired once, whichever side each is on: a second request leaves them out, and
-- two requests racing to pair them cannot both commit.
CREATE UNIQUE INDEX preference_pairs_items_key ON preference_pairs
    (MIN(left_item_id, right_item_id), MAX(left_item_id, right_item_id));
-- Pairs touching a run's items, for deleting the run.
CREATE INDEX preference_pairs_left_idx ON preference_pairs (left_item_id);
CREATE INDEX preference_pairs_right_idx ON preference_pairs (right_item_id);

-- A rater's answer on a pair: `a` (the left output is better), `b`, `tie`, or `both_bad`.
CREATE TABLE preference_labels (
    id           INTEGER PRIMARY KEY,
    task_id      INTEGER NOT NULL REFERENCES annotation_tasks(id),
    rater_id     INTEGER NOT NULL REFERENCES users(id),
    choice       TEXT    NOT NULL CHECK (choice IN ('a','b','tie','both_bad')),
    rationale    TEXT    NOT NULL DEFAULT '',
    duration_ms  INTEGER,
    created_at   INTEGER NOT NULL,
    CONSTRAINT preference_labels_task_rater_key UNIQUE (task_id, rater_id)
);
CREATE INDEX preference_labels_rater_idx ON preference_labels (rater_id, id);
