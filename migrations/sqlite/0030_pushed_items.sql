-- Items pushed from outside (`POST /api/v1/annotation/items`): production traces or another
-- tool's outputs, sent to raters without a run. A pushed item is an annotation task with no
-- work item: kind `pushed` for one output (labelled pass/fail or by its rubric), kind `pair`
-- for two outputs (answered A/B/tie/both bad). Its content is in `pushed_items`; claims,
-- overlap, skips, priorities, SLAs, reviews and the `label.completed` webhook treat it as any
-- item.
--
-- SQLite cannot change a CHECK in place, so `annotation_tasks` is rebuilt as 0026 rebuilt it
-- (foreign keys off on the migrating connection, same ids, indexes made again, every reference
-- into the table checked at the end).
PRAGMA legacy_alter_table = ON;
ALTER TABLE annotation_tasks RENAME TO annotation_tasks_before_pushed;

CREATE TABLE annotation_tasks (
    id               INTEGER PRIMARY KEY,
    -- The item under judgement; NULL for a pair (its two items are in preference_pairs or
    -- pushed_items) and for a pushed item (in pushed_items).
    work_item_id     INTEGER REFERENCES work_items(id),
    reason           TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('open','leased','done')),
    leased_by        INTEGER REFERENCES users(id),
    lease_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    kind             TEXT    NOT NULL DEFAULT 'escalation' CHECK (kind IN ('escalation','audit','pair','pushed')),
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
    run_id           INTEGER,
    decided_at       INTEGER,
    CONSTRAINT annotation_tasks_work_item_key UNIQUE (work_item_id),
    CONSTRAINT annotation_tasks_pair_check CHECK ((kind IN ('pair','pushed')) = (work_item_id IS NULL))
);
INSERT INTO annotation_tasks (id, work_item_id, reason, state, leased_by, lease_expires_at, created_at,
    completed_at, kind, sampling_rate, labels_needed, labels_done, priority, skill, due_at, review_rate,
    escalated_at, rubric_id, consensus, run_id, decided_at)
SELECT id, work_item_id, reason, state, leased_by, lease_expires_at, created_at,
    completed_at, kind, sampling_rate, labels_needed, labels_done, priority, skill, due_at, review_rate,
    escalated_at, rubric_id, consensus, run_id, decided_at
FROM annotation_tasks_before_pushed;
DROP TABLE annotation_tasks_before_pushed;

CREATE INDEX annotation_tasks_queue_idx ON annotation_tasks (priority DESC, due_at, id) WHERE state = 'open';
CREATE INDEX annotation_tasks_escalated_idx ON annotation_tasks (priority DESC, due_at, id)
    WHERE state = 'open' AND escalated_at IS NOT NULL;
CREATE INDEX annotation_tasks_completed_idx ON annotation_tasks (completed_at) WHERE state = 'done';
CREATE INDEX annotation_tasks_created_idx ON annotation_tasks (created_at);
CREATE INDEX annotation_tasks_open_report_idx ON annotation_tasks
    (priority DESC, due_at, run_id, created_at, labels_needed, labels_done, escalated_at)
    WHERE state = 'open';
CREATE INDEX annotation_tasks_decided_idx ON annotation_tasks (decided_at, id) WHERE decided_at IS NOT NULL;

PRAGMA legacy_alter_table = OFF;

CREATE TEMP TABLE annotation_tasks_rebuild_check (broken INTEGER CHECK (broken = 0));
INSERT INTO annotation_tasks_rebuild_check
    SELECT 1 FROM (
        SELECT parent FROM pragma_foreign_key_check('labels')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('annotation_skips')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('task_leases')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('gold_items')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('preference_pairs')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('preference_labels')
    ) WHERE parent = 'annotation_tasks' LIMIT 1;
DROP TABLE annotation_tasks_rebuild_check;

-- A named queue of pushed items, owned by the team of whoever first pushed to it: only its
-- members, leads and admins push to it or read its items back.
CREATE TABLE pushed_queues (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    team       TEXT    NOT NULL,
    created_by INTEGER NOT NULL REFERENCES users(id),
    created_at INTEGER NOT NULL,
    CONSTRAINT pushed_queues_name_key UNIQUE (name)
);

-- A pushed item: its input, one output (or two for a pair, in the order pushed) and the
-- pusher's metadata, named by the SHA-256 of that content; pushing the same content to the same
-- queue again finds this item instead of making another. A pair's sides are drawn from the
-- hash (`first_on_left`), so raters do not always see the first output as A.
CREATE TABLE pushed_items (
    task_id       INTEGER PRIMARY KEY REFERENCES annotation_tasks(id),
    queue_id      INTEGER NOT NULL REFERENCES pushed_queues(id),
    content_hash  TEXT    NOT NULL,
    input         TEXT    NOT NULL,
    target        TEXT    NOT NULL DEFAULT '',
    first_output  TEXT    NOT NULL,
    second_output TEXT,
    first_on_left BOOLEAN NOT NULL DEFAULT TRUE,
    metadata      TEXT    NOT NULL DEFAULT '{}',
    -- The humans' pass or fail on a single output, once decided.
    verdict       TEXT    CHECK (verdict IN ('pass','fail')),
    pushed_by     INTEGER NOT NULL REFERENCES users(id),
    created_at    INTEGER NOT NULL,
    CONSTRAINT pushed_items_queue_hash_key UNIQUE (queue_id, content_hash)
);
CREATE INDEX pushed_items_queue_idx ON pushed_items (queue_id, task_id);
