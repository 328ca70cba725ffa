-- A worker's commit (and a run copied whole at launch) keeps its runs' tallies itself: grouped
-- verdict, outcome and grader counts added once per commit, not one upsert per row from each
-- of three triggers. It says so with a row in `commit_tallies`, written and removed inside its
-- own transaction (so no other connection ever sees it); every other writer (labels,
-- launches, conversations that stop) is still tallied by these triggers.
CREATE TABLE commit_tallies (
    one INTEGER PRIMARY KEY CHECK (one = 1)
);

DROP TRIGGER work_items_tally_insert;
CREATE TRIGGER work_items_tally_insert AFTER INSERT ON work_items
WHEN NEW.verdict IS NOT NULL AND NOT EXISTS (SELECT 1 FROM commit_tallies)
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

DROP TRIGGER work_items_tally_first_verdict;
CREATE TRIGGER work_items_tally_first_verdict AFTER UPDATE OF verdict ON work_items
WHEN OLD.verdict IS NULL AND NEW.verdict IS NOT NULL AND NOT EXISTS (SELECT 1 FROM commit_tallies)
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

DROP TRIGGER work_items_tally_changed_verdict;
CREATE TRIGGER work_items_tally_changed_verdict AFTER UPDATE OF verdict ON work_items
WHEN OLD.verdict IS NOT NULL AND OLD.verdict IS NOT NEW.verdict AND NOT EXISTS (SELECT 1 FROM commit_tallies)
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

DROP TRIGGER generations_tally_insert;
CREATE TRIGGER generations_tally_insert AFTER INSERT ON generations
WHEN NOT EXISTS (SELECT 1 FROM commit_tallies)
BEGIN
    INSERT INTO run_tallies (run_id, category, field, value, count)
        SELECT w.run_id, w.category, 'outcome', NEW.outcome, 1 FROM work_items w WHERE w.id = NEW.work_item_id
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = count + 1;
END;

DROP TRIGGER grades_run_grader;
CREATE TRIGGER grades_run_grader AFTER INSERT ON grades
WHEN NEW.stage = 'deterministic' AND NOT EXISTS (SELECT 1 FROM commit_tallies)
BEGIN
    INSERT INTO run_graders (run_id, grader, count)
        SELECT w.run_id, NEW.grader, 1 FROM work_items w WHERE w.id = NEW.work_item_id
        ON CONFLICT (run_id, grader) DO UPDATE SET count = count + 1;
END;
