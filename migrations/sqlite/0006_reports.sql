-- Reports and checkpoint comparisons at a million items: per-category tallies kept up to date
-- by triggers as results arrive (so a report never counts a run's rows), and per-run snapshots
-- (one compact column of verdicts in identity order) that comparisons pair by position.

-- The dataset item's category on each identity: reports and diffs filter by it without a join.
ALTER TABLE work_items ADD COLUMN category TEXT NOT NULL DEFAULT '';
UPDATE work_items SET category = COALESCE((SELECT i.category FROM dataset_items i
    WHERE i.revision_id = work_items.revision_id AND i.case_id = work_items.case_id), '');

-- Counts per run, category, field and value:
--   field 'verdict': pass / fail / uncertain / error of the current final verdict;
--   field 'outcome': ok / truncated / empty / refused / endpoint_error / timeout of the answer;
--   field 'changes' (value ''): decided verdicts changed since (a human overturned a grade),
--     so a snapshot knows it is stale even when the counts happen to balance.
CREATE TABLE run_tallies (
    run_id   INTEGER NOT NULL REFERENCES runs(id),
    category TEXT    NOT NULL,
    field    TEXT    NOT NULL CHECK (field IN ('verdict','outcome','changes')),
    value    TEXT    NOT NULL,
    count    INTEGER NOT NULL,
    PRIMARY KEY (run_id, category, field, value)
);

INSERT INTO run_tallies (run_id, category, field, value, count)
    SELECT run_id, category, 'verdict', verdict, COUNT(*) FROM work_items
    WHERE verdict IS NOT NULL GROUP BY run_id, category, verdict;
INSERT INTO run_tallies (run_id, category, field, value, count)
    SELECT w.run_id, w.category, 'outcome', g.outcome, COUNT(*)
    FROM generations g JOIN work_items w ON w.id = g.work_item_id
    GROUP BY w.run_id, w.category, g.outcome;

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

CREATE TRIGGER generations_tally_insert AFTER INSERT ON generations
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        SELECT w.run_id, w.category, 'outcome', NEW.outcome, 1 FROM work_items w WHERE w.id = NEW.work_item_id
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

-- A run's results in identity order, packed: built by a scan when a report or comparison
-- needs it and the run's tallies have moved since (`version`), then reused. Comparisons pair
-- two snapshots position by position when their identity lists hash alike.
CREATE TABLE run_snapshots (
    run_id        INTEGER PRIMARY KEY REFERENCES runs(id),
    version       TEXT    NOT NULL,   -- the tallies it was built from
    identity_hash TEXT    NOT NULL,   -- hash of the ordered (case id, repetition) list
    item_count    INTEGER NOT NULL,
    data          BLOB    NOT NULL,   -- see engine/src/report/snapshot.rs
    built_at      INTEGER NOT NULL,
    build_ms      INTEGER NOT NULL
);

-- A promotion decision: made on complete reports only.
CREATE TABLE promotion_decisions (
    id              INTEGER PRIMARY KEY,
    baseline_run_id INTEGER NOT NULL REFERENCES runs(id),
    candidate_run_id INTEGER NOT NULL REFERENCES runs(id),
    decision        TEXT    NOT NULL CHECK (decision IN ('promote','reject')),
    note            TEXT    NOT NULL DEFAULT '',
    summary_json    TEXT    NOT NULL,  -- the comparison as it stood when decided
    decided_by      INTEGER REFERENCES users(id),
    decided_at      INTEGER NOT NULL
);
