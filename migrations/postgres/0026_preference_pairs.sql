-- Side-by-side preference: a researcher sends pairs of outputs (the same case answered by two
-- runs) to raters, who say which is better. A pair is an annotation task of kind `pair`, so
-- claims, overlap, skips, priorities, SLAs and escalation treat it as any item; it has no
-- single work item, and its two sides are in `preference_pairs`.
ALTER TABLE annotation_tasks ALTER COLUMN work_item_id DROP NOT NULL;
ALTER TABLE annotation_tasks DROP CONSTRAINT annotation_tasks_kind_check;
ALTER TABLE annotation_tasks ADD CONSTRAINT annotation_tasks_kind_check
    CHECK (kind IN ('escalation','audit','pair'));
ALTER TABLE annotation_tasks ADD CONSTRAINT annotation_tasks_pair_check
    CHECK ((kind = 'pair') = (work_item_id IS NULL));

-- What a researcher sent from the Compare page: pairs of run A's and run B's answers to the
-- same cases, chosen by `selection` (`differ`: the verdicts differ; `unsure`: a judge was
-- unsure or a human decided either side; `random`: a uniform sample), drawn with `seed`.
CREATE TABLE pair_requests (
    id            BIGSERIAL PRIMARY KEY,
    run_a         BIGINT  NOT NULL REFERENCES runs(id),
    run_b         BIGINT  NOT NULL REFERENCES runs(id),
    selection     TEXT    NOT NULL CHECK (selection IN ('differ','unsure','random')),
    pairs         BIGINT  NOT NULL CHECK (pairs >= 1),
    labels_needed BIGINT  NOT NULL CHECK (labels_needed >= 1),
    seed          BIGINT  NOT NULL,
    note          TEXT    NOT NULL DEFAULT '',
    requested_by  BIGINT  NOT NULL REFERENCES users(id),
    created_at    BIGINT  NOT NULL,
    CHECK (run_a <> run_b)
);

-- A pair's two sides as raters see them: the left output is shown as A, the right as B.
-- Which run is on the left is drawn per pair and recorded here.
CREATE TABLE preference_pairs (
    task_id       BIGINT PRIMARY KEY REFERENCES annotation_tasks(id),
    request_id    BIGINT NOT NULL REFERENCES pair_requests(id),
    left_item_id  BIGINT NOT NULL REFERENCES work_items(id),
    right_item_id BIGINT NOT NULL REFERENCES work_items(id),
    CHECK (left_item_id <> right_item_id)
);
CREATE INDEX preference_pairs_request_idx ON preference_pairs (request_id, task_id);
-- Two items are paired once, whichever side each is on: a second request leaves them out, and
-- two requests racing to pair them cannot both commit.
CREATE UNIQUE INDEX preference_pairs_items_key ON preference_pairs
    (LEAST(left_item_id, right_item_id), GREATEST(left_item_id, right_item_id));
-- Pairs touching a run's items, for deleting the run.
CREATE INDEX preference_pairs_left_idx ON preference_pairs (left_item_id);
CREATE INDEX preference_pairs_right_idx ON preference_pairs (right_item_id);

-- A rater's answer on a pair: `a` (the left output is better), `b`, `tie`, or `both_bad`.
CREATE TABLE preference_labels (
    id           BIGSERIAL PRIMARY KEY,
    task_id      BIGINT NOT NULL REFERENCES annotation_tasks(id),
    rater_id     BIGINT NOT NULL REFERENCES users(id),
    choice       TEXT   NOT NULL CHECK (choice IN ('a','b','tie','both_bad')),
    rationale    TEXT   NOT NULL DEFAULT '',
    duration_ms  BIGINT,
    created_at   BIGINT NOT NULL,
    CONSTRAINT preference_labels_task_rater_key UNIQUE (task_id, rater_id)
);
CREATE INDEX preference_labels_rater_idx ON preference_labels (rater_id, id);
