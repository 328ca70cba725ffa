-- A pairwise judge compares two answers to one question (A, B or TIE), asked in both orders.
-- Pairwise judges are not canaried (their canary would need pair reference sets).
ALTER TABLE judges ADD COLUMN pairwise BOOLEAN NOT NULL DEFAULT FALSE;

-- A pair request may ask a pairwise judge first: a pair it decides with at least
-- judge_threshold confidence, both orders agreeing, needs no rater (unless drawn for the audit
-- at audit_rate, which calibrates the judge); the others go to raters.
ALTER TABLE pair_requests ADD COLUMN judge_id INTEGER REFERENCES judges(id);
ALTER TABLE pair_requests ADD COLUMN judge_threshold REAL;
ALTER TABLE pair_requests ADD COLUMN audit_rate REAL NOT NULL DEFAULT 0;

-- A pair waiting for its judge (pending) is not offered to raters; judge_claimed_* is the
-- worker judging it (a claim left stale by a process that died is taken over).
ALTER TABLE preference_pairs ADD COLUMN judge_state TEXT CHECK (judge_state IN ('pending', 'judged'));
ALTER TABLE preference_pairs ADD COLUMN judge_claimed_by TEXT;
ALTER TABLE preference_pairs ADD COLUMN judge_claimed_at INTEGER;
CREATE INDEX preference_pairs_judging_idx ON preference_pairs (task_id) WHERE judge_state = 'pending';

-- What the judge said on a pair: each order's reply and reading, the combined verdict (in the
-- pair's own sides: a = its left answer), and what became of the pair.
CREATE TABLE pair_judgements (
    task_id      INTEGER PRIMARY KEY REFERENCES annotation_tasks(id),
    judge_id     INTEGER NOT NULL REFERENCES judges(id),
    left_first   TEXT    NOT NULL,
    right_first  TEXT    NOT NULL,
    verdict      TEXT    NOT NULL,
    choice       TEXT    CHECK (choice IN ('a', 'b', 'tie')),
    confidence   REAL,
    consistent   BOOLEAN NOT NULL,
    -- decided: the judge's choice decided the pair; audited: it would have, but the pair was
    -- drawn for raters anyway.
    decided      BOOLEAN NOT NULL,
    audited      BOOLEAN NOT NULL,
    failure      TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX pair_judgements_judge_idx ON pair_judgements (judge_id, task_id);
