-- Tally updates take their run's row lock first. Without it, two commits whose items touch a
-- run's per-category tally rows in different orders deadlocked (each held a row the other
-- needed). Every writer of a run's tallies now queues on the run's row instead, which commits
-- of one run already did at their end (`runs.done_count`).
CREATE OR REPLACE FUNCTION run_tally_add(p_run BIGINT, p_category TEXT, p_field TEXT, p_value TEXT, p_delta BIGINT)
RETURNS void LANGUAGE sql AS $$
    SELECT 1 FROM runs WHERE id = p_run FOR NO KEY UPDATE;
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (p_run, p_category, p_field, p_value, p_delta)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = run_tallies.count + excluded.count;
$$;

-- A run's identities in identity (id) order without a sort: the snapshot scan reads them so.
CREATE INDEX work_items_run_order_idx ON work_items (run_id, id);

-- Which deterministic graders graded a run's answers, kept by a trigger, so the snapshot scan
-- checks "one grader per run" without looking up each identity's grade.
CREATE TABLE run_graders (
    run_id BIGINT NOT NULL REFERENCES runs(id),
    grader TEXT   NOT NULL,
    count  BIGINT NOT NULL,
    PRIMARY KEY (run_id, grader)
);

INSERT INTO run_graders (run_id, grader, count)
    SELECT w.run_id, d.grader, COUNT(*) FROM grades d JOIN work_items w ON w.id = d.work_item_id
    WHERE d.stage = 'deterministic' GROUP BY w.run_id, d.grader;

CREATE FUNCTION grades_run_grader() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_run BIGINT;
BEGIN
    SELECT run_id INTO v_run FROM work_items WHERE id = NEW.work_item_id;
    PERFORM 1 FROM runs WHERE id = v_run FOR NO KEY UPDATE;
    INSERT INTO run_graders (run_id, grader, count) VALUES (v_run, NEW.grader, 1)
        ON CONFLICT (run_id, grader) DO UPDATE SET count = run_graders.count + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER grades_run_grader AFTER INSERT ON grades
    FOR EACH ROW WHEN (NEW.stage = 'deterministic') EXECUTE FUNCTION grades_run_grader();
