-- (On PostgreSQL this migration also makes tally updates lock their run's row first; SQLite's
-- single writer never interleaves two commits, so it needs no such lock.)

-- A run's identities in identity (id) order without a sort: the snapshot scan reads them so.
CREATE INDEX work_items_run_order_idx ON work_items (run_id, id);

-- Which deterministic graders graded a run's answers, kept by a trigger, so the snapshot scan
-- checks "one grader per run" without looking up each identity's grade.
CREATE TABLE run_graders (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    grader TEXT    NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (run_id, grader)
);

INSERT INTO run_graders (run_id, grader, count)
    SELECT w.run_id, d.grader, COUNT(*) FROM grades d JOIN work_items w ON w.id = d.work_item_id
    WHERE d.stage = 'deterministic' GROUP BY w.run_id, d.grader;

CREATE TRIGGER grades_run_grader AFTER INSERT ON grades
WHEN NEW.stage = 'deterministic'
BEGIN
    INSERT INTO run_graders (run_id, grader, count)
        SELECT w.run_id, NEW.grader, 1 FROM work_items w WHERE w.id = NEW.work_item_id
        ON CONFLICT (run_id, grader) DO UPDATE SET count = count + 1;
END;
