-- Items pushed from outside (`POST /api/v1/annotation/items`): production traces or another
-- tool's outputs, sent to raters without a run. A pushed item is an annotation task with no
-- work item: kind `pushed` for one output (labelled pass/fail or by its rubric), kind `pair`
-- for two outputs (answered A/B/tie/both bad). Its content is in `pushed_items`; claims,
-- overlap, skips, priorities, SLAs, reviews and the `label.completed` webhook treat it as any
-- item.
ALTER TABLE annotation_tasks DROP CONSTRAINT annotation_tasks_kind_check;
ALTER TABLE annotation_tasks ADD CONSTRAINT annotation_tasks_kind_check
    CHECK (kind IN ('escalation','audit','pair','pushed'));
ALTER TABLE annotation_tasks DROP CONSTRAINT annotation_tasks_pair_check;
ALTER TABLE annotation_tasks ADD CONSTRAINT annotation_tasks_pair_check
    CHECK ((kind IN ('pair','pushed')) = (work_item_id IS NULL));

-- A named queue of pushed items, owned by the team of whoever first pushed to it: only its
-- members, leads and admins push to it or read its items back.
CREATE TABLE pushed_queues (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT    NOT NULL,
    team       TEXT    NOT NULL,
    created_by BIGINT  NOT NULL REFERENCES users(id),
    created_at BIGINT  NOT NULL,
    CONSTRAINT pushed_queues_name_key UNIQUE (name)
);

-- A pushed item: its input, one output (or two for a pair, in the order pushed) and the
-- pusher's metadata, named by the SHA-256 of that content; pushing the same content to the same
-- queue again finds this item instead of making another. A pair's sides are drawn from the
-- hash (`first_on_left`), so raters do not always see the first output as A.
CREATE TABLE pushed_items (
    task_id       BIGINT  PRIMARY KEY REFERENCES annotation_tasks(id),
    queue_id      BIGINT  NOT NULL REFERENCES pushed_queues(id),
    content_hash  TEXT    NOT NULL,
    input         TEXT    NOT NULL,
    target        TEXT    NOT NULL DEFAULT '',
    first_output  TEXT    NOT NULL,
    second_output TEXT,
    first_on_left BOOLEAN NOT NULL DEFAULT TRUE,
    metadata      TEXT    NOT NULL DEFAULT '{}',
    -- The humans' pass or fail on a single output, once decided.
    verdict       TEXT    CHECK (verdict IN ('pass','fail')),
    pushed_by     BIGINT  NOT NULL REFERENCES users(id),
    created_at    BIGINT  NOT NULL,
    CONSTRAINT pushed_items_queue_hash_key UNIQUE (queue_id, content_hash)
);
CREATE INDEX pushed_items_queue_idx ON pushed_items (queue_id, task_id);
