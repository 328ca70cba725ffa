-- Trends across a training run: checkpoints say which training run they come from and at
-- which step, and a researcher can watch an eval's trend for regressions against a baseline
-- policy (alerts go to the leads like the queue's).
ALTER TABLE checkpoints ADD COLUMN training_run TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoints ADD COLUMN training_step INTEGER;
CREATE INDEX checkpoints_training_idx ON checkpoints (training_run, training_step);

-- The latest run of an eval on a checkpoint, without scanning the eval's runs.
CREATE INDEX runs_eval_checkpoint_idx ON runs (eval_id, checkpoint_id, id);

CREATE TABLE trend_watches (
    eval_id        INTEGER NOT NULL REFERENCES evals(id),
    training_run   TEXT    NOT NULL,
    -- first, previous, best or pinned (then pinned_checkpoint_id says which)
    policy         TEXT    NOT NULL CHECK (policy IN ('first','previous','best','pinned')),
    pinned_checkpoint_id INTEGER REFERENCES checkpoints(id),
    created_by     INTEGER REFERENCES users(id),
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (eval_id, training_run)
);

CREATE INDEX promotion_decisions_candidate_idx ON promotion_decisions (candidate_run_id);
CREATE INDEX promotion_decisions_baseline_idx ON promotion_decisions (baseline_run_id);
