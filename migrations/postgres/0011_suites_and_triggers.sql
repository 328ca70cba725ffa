-- Tiered suites that new checkpoints trigger: a smoke suite on every checkpoint, a full suite
-- on every Nth checkpoint of a training run (or on demand), each a set of evals.
CREATE TABLE suites (
    id           BIGSERIAL PRIMARY KEY,
    name         TEXT    NOT NULL,
    tier         TEXT    NOT NULL CHECK (tier IN ('smoke', 'full')),
    -- Full suites run on every Nth checkpoint of a training run (1: every one; 0: on demand only).
    every_nth    BIGINT  NOT NULL DEFAULT 1 CHECK (every_nth >= 0),
    -- Only checkpoints of this training run ('' for any).
    training_run TEXT    NOT NULL DEFAULT '',
    -- The fair-share team the triggered runs are charged to.
    team         TEXT    NOT NULL DEFAULT 'default',
    created_by   BIGINT  REFERENCES users(id),
    created_at   BIGINT  NOT NULL,
    CONSTRAINT suites_name_key UNIQUE (name)
);

CREATE TABLE suite_evals (
    suite_id BIGINT  NOT NULL REFERENCES suites(id) ON DELETE CASCADE,
    eval_id  BIGINT  NOT NULL REFERENCES evals(id),
    PRIMARY KEY (suite_id, eval_id)
);

-- Every run a suite launched, and why: for the audit trail and the checkpoints page.
CREATE TABLE suite_launches (
    suite_id      BIGINT  NOT NULL REFERENCES suites(id) ON DELETE CASCADE,
    checkpoint_id BIGINT  NOT NULL REFERENCES checkpoints(id),
    run_id        BIGINT  NOT NULL REFERENCES runs(id),
    reason        TEXT    NOT NULL,   -- smoke, every 5th checkpoint, on demand, …
    created_at    BIGINT  NOT NULL,
    PRIMARY KEY (suite_id, checkpoint_id, run_id)
);

-- Checkpoint announcements a watched directory or manifest file held, so a restart registers
-- nothing twice and a bad announcement is reported once (key: file, or file#line).
CREATE TABLE watched_announcements (
    source        TEXT    PRIMARY KEY,
    content_hash  TEXT    NOT NULL,
    checkpoint_id BIGINT REFERENCES checkpoints(id),
    error         TEXT,
    seen_at       BIGINT  NOT NULL
);
