-- The drift canary of each judge version (domain/src/grading/canary.rs): the previous version
-- it is compared with, its state (a canary claimed by a process that died is claimed again once
-- stale), the reference items it re-graded, and the drift report as JSON.
CREATE TABLE judge_canaries (
    judge_id          BIGINT NOT NULL PRIMARY KEY REFERENCES judges(id),
    baseline_judge_id BIGINT NOT NULL REFERENCES judges(id),
    state             TEXT    NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    claimed_by        TEXT    NOT NULL,
    started_at        BIGINT NOT NULL,
    finished_at       BIGINT,
    reference_items   TEXT,
    report            TEXT,
    error             TEXT
);
