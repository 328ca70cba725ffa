-- The drift canary of each judge version (domain/src/grading/canary.rs): the previous version
-- it is compared with, its state (a canary claimed by a process that died is claimed again once
-- stale), the reference items it re-graded, and the drift report as JSON.
CREATE TABLE judge_canaries (
    judge_id          INTEGER NOT NULL PRIMARY KEY REFERENCES judges(id),
    baseline_judge_id INTEGER NOT NULL REFERENCES judges(id),
    -- skipped: a version made before canaries existed (never re-graded on upgrade).
    state             TEXT    NOT NULL CHECK (state IN ('running', 'done', 'failed', 'skipped')),
    claimed_by        TEXT    NOT NULL,
    started_at        INTEGER NOT NULL,
    finished_at       INTEGER,
    reference_items   TEXT,
    report            TEXT,
    error             TEXT
);

-- Versions made before this migration are not canaried now: their endpoints may be long gone.
INSERT INTO judge_canaries (judge_id, baseline_judge_id, state, claimed_by, started_at, finished_at)
SELECT j.id, p.id, 'skipped', 'migration', j.created_at, j.created_at
FROM judges j JOIN judges p ON p.name = j.name AND p.version = j.version - 1;
