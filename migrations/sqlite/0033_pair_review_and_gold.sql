-- Pairs get the quality control single items have: a sample of pair answers (and every answer
-- on a pair whose raters split) goes to senior reviewers, who accept, correct (with the right
-- choice, which then decides the pair) or reject (the pair returns to the queue); and a decided
-- pair can be gold, answered `a`, `b`, `tie` or `both_bad` as its sides are shown.

-- A pair answer's standing and review, as for labels (0004, 0015).
ALTER TABLE preference_labels ADD COLUMN state TEXT NOT NULL DEFAULT 'standing' CHECK (state IN ('standing','rejected'));
ALTER TABLE preference_labels ADD COLUMN review_state TEXT CHECK (review_state IN ('pending','accepted','corrected','rejected'));
ALTER TABLE preference_labels ADD COLUMN review_served_to INTEGER REFERENCES users(id);
ALTER TABLE preference_labels ADD COLUMN review_served_until INTEGER;
CREATE INDEX preference_labels_review_idx ON preference_labels (review_state, id) WHERE review_state = 'pending';

-- A senior reviewer's decision on a pair answer; `choice` is the correction.
CREATE TABLE pair_reviews (
    id           INTEGER PRIMARY KEY,
    label_id     INTEGER NOT NULL REFERENCES preference_labels(id),
    reviewer_id  INTEGER NOT NULL REFERENCES users(id),
    decision     TEXT    NOT NULL CHECK (decision IN ('accepted','corrected','rejected')),
    choice       TEXT    CHECK (choice IN ('a','b','tie','both_bad')),
    reason       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    CONSTRAINT pair_reviews_label_key UNIQUE (label_id),
    CHECK ((decision = 'corrected') = (choice IS NOT NULL))
);
-- A rater's record counts reviews of their pair answers.
CREATE INDEX pair_reviews_reviewer_idx ON pair_reviews (reviewer_id);

-- Gold answers now include a pair's choices, so `gold_items` is rebuilt with the wider check
-- the way 0026 rebuilt `annotation_tasks` (foreign keys are off during migrations).
PRAGMA legacy_alter_table = ON;
ALTER TABLE gold_items RENAME TO gold_items_before_pairs;
CREATE TABLE gold_items (
    id          INTEGER PRIMARY KEY,
    task_id     INTEGER NOT NULL REFERENCES annotation_tasks(id),
    -- `pass`/`fail` for an item, `a`/`b`/`tie`/`both_bad` for a pair (sides as shown).
    answer      TEXT    NOT NULL CHECK (answer IN ('pass','fail','a','b','tie','both_bad')),
    note        TEXT    NOT NULL DEFAULT '',
    created_by  INTEGER REFERENCES users(id),
    created_at  INTEGER NOT NULL,
    retired_at  INTEGER,
    CONSTRAINT gold_items_task_key UNIQUE (task_id)
);
INSERT INTO gold_items (id, task_id, answer, note, created_by, created_at, retired_at)
SELECT id, task_id, answer, note, created_by, created_at, retired_at FROM gold_items_before_pairs;
DROP TABLE gold_items_before_pairs;
PRAGMA legacy_alter_table = OFF;

CREATE TEMP TABLE gold_items_rebuild_check (broken INTEGER CHECK (broken = 0));
INSERT INTO gold_items_rebuild_check
    SELECT 1 FROM (
        SELECT parent FROM pragma_foreign_key_check('gold_answers')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('task_leases')
    ) WHERE parent = 'gold_items' LIMIT 1;
DROP TABLE gold_items_rebuild_check;

-- A rater's answer to a gold pair, so a gold pair brought back with another answer is scored
-- again (an item's answer is one of two, so its score simply flips).
ALTER TABLE gold_answers ADD COLUMN choice TEXT CHECK (choice IN ('a','b','tie','both_bad'));
