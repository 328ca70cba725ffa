-- Pairs get the quality control single items have: a sample of pair answers (and every answer
-- on a pair whose raters split) goes to senior reviewers, who accept, correct (with the right
-- choice, which then decides the pair) or reject (the pair returns to the queue); and a decided
-- pair can be gold, answered `a`, `b`, `tie` or `both_bad` as its sides are shown.

-- A pair answer's standing and review, as for labels (0004, 0015).
ALTER TABLE preference_labels ADD COLUMN state TEXT NOT NULL DEFAULT 'standing' CHECK (state IN ('standing','rejected'));
ALTER TABLE preference_labels ADD COLUMN review_state TEXT CHECK (review_state IN ('pending','accepted','corrected','rejected'));
ALTER TABLE preference_labels ADD COLUMN review_served_to BIGINT REFERENCES users(id);
ALTER TABLE preference_labels ADD COLUMN review_served_until BIGINT;
CREATE INDEX preference_labels_review_idx ON preference_labels (review_state, id) WHERE review_state = 'pending';

-- A senior reviewer's decision on a pair answer; `choice` is the correction.
CREATE TABLE pair_reviews (
    id           BIGSERIAL PRIMARY KEY,
    label_id     BIGINT NOT NULL REFERENCES preference_labels(id),
    reviewer_id  BIGINT NOT NULL REFERENCES users(id),
    decision     TEXT   NOT NULL CHECK (decision IN ('accepted','corrected','rejected')),
    choice       TEXT   CHECK (choice IN ('a','b','tie','both_bad')),
    reason       TEXT   NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    CONSTRAINT pair_reviews_label_key UNIQUE (label_id),
    CHECK ((decision = 'corrected') = (choice IS NOT NULL))
);
CREATE INDEX pair_reviews_reviewer_idx ON pair_reviews (reviewer_id);

-- Gold answers now include a pair's choices (sides as shown).
ALTER TABLE gold_items DROP CONSTRAINT gold_items_answer_check;
ALTER TABLE gold_items ADD CONSTRAINT gold_items_answer_check
    CHECK (answer IN ('pass','fail','a','b','tie','both_bad'));

-- A rater's answer to a gold pair, so a gold pair brought back with another answer is scored
-- again (an item's answer is one of two, so its score simply flips).
ALTER TABLE gold_answers ADD COLUMN choice TEXT CHECK (choice IN ('a','b','tie','both_bad'));
