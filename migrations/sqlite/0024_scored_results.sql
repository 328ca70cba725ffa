-- Rolling log-likelihood (perplexity, bits per byte): an identity can be scored without a
-- verdict. Its answer is a number, not right or wrong, so it is recorded as verdict `scored`
-- and decided by `scored`: done and decided, never an error, never in a pass rate.
--
-- SQLite cannot change a table's constraints in place, so the table is rebuilt as in 0019
-- (renamed aside, created again with the same ids, the old one dropped, its indexes and
-- triggers created again), with foreign keys off and every reference into it checked at the
-- end, where a broken one undoes the migration.
PRAGMA legacy_alter_table = ON;
ALTER TABLE work_items RENAME TO work_items_before_scored;

CREATE TABLE work_items (
    id               INTEGER PRIMARY KEY,
    run_id           INTEGER NOT NULL REFERENCES runs(id),
    revision_id      INTEGER NOT NULL REFERENCES dataset_revisions(id),
    case_id          TEXT    NOT NULL,
    checkpoint_id    INTEGER NOT NULL REFERENCES checkpoints(id),
    repetition       INTEGER NOT NULL,
    turn             INTEGER NOT NULL DEFAULT 1,   -- of a conversation, from 1
    state            TEXT    NOT NULL CHECK (state IN ('waiting','queued','leased','done','stopped')),
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,
    verdict          TEXT CHECK (verdict IN ('pass','fail','uncertain','error','scored')),
    cost             INTEGER NOT NULL DEFAULT 0,
    shard            INTEGER NOT NULL DEFAULT 0,
    generation_key   TEXT,
    decided_by       TEXT CHECK (decided_by IN ('deterministic','cheap_judge','strong_judge','human','pending','error','scored')),
    category         TEXT    NOT NULL DEFAULT '',
    CONSTRAINT work_items_identity_key UNIQUE (run_id, revision_id, case_id, checkpoint_id, repetition, turn)
);
INSERT INTO work_items (id, run_id, revision_id, case_id, checkpoint_id, repetition, turn, state, lease_owner,
    lease_expires_at, attempts, verdict, cost, shard, generation_key, decided_by, category)
SELECT id, run_id, revision_id, case_id, checkpoint_id, repetition, turn, state, lease_owner,
    lease_expires_at, attempts, verdict, cost, shard, generation_key, decided_by, category
FROM work_items_before_scored;
DROP TABLE work_items_before_scored;

CREATE INDEX work_items_queued_idx ON work_items (run_id, cost DESC, id) WHERE state = 'queued';
CREATE INDEX work_items_leased_idx ON work_items (lease_owner) WHERE state = 'leased';
CREATE INDEX work_items_run_order_idx ON work_items (run_id, id);

CREATE TRIGGER work_items_tally_insert AFTER INSERT ON work_items
WHEN NEW.verdict IS NOT NULL
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

CREATE TRIGGER work_items_tally_first_verdict AFTER UPDATE OF verdict ON work_items
WHEN OLD.verdict IS NULL AND NEW.verdict IS NOT NULL
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

CREATE TRIGGER work_items_tally_changed_verdict AFTER UPDATE OF verdict ON work_items
WHEN OLD.verdict IS NOT NULL AND OLD.verdict IS NOT NEW.verdict
BEGIN
    UPDATE run_tallies SET count = count - 1
        WHERE run_id = OLD.run_id AND category = OLD.category AND field = 'verdict' AND value = OLD.verdict;
    INSERT INTO run_tallies (run_id, category, field, value, count)
        SELECT NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1 WHERE NEW.verdict IS NOT NULL
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (NEW.run_id, NEW.category, 'changes', '', 1)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

PRAGMA legacy_alter_table = OFF;

-- Every reference into the rebuilt table still holds; checked here, where a failure undoes the
-- whole migration (the guard's CHECK fails on the first broken reference).
CREATE TEMP TABLE work_items_rebuild_check (broken INTEGER CHECK (broken = 0));
INSERT INTO work_items_rebuild_check
    SELECT 1 FROM (
        SELECT parent FROM pragma_foreign_key_check('generations')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('grades')
        UNION ALL SELECT parent FROM pragma_foreign_key_check('annotation_tasks')
    ) WHERE parent = 'work_items' LIMIT 1;
DROP TABLE work_items_rebuild_check;
