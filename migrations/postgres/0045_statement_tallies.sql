-- A commit's generations and grades update their run's tallies once per statement, not once
-- per row. Row by row, each of a 500-row commit's rows locked the run's row and upserted a
-- tally, and the commit held that lock (which serialises a run's commits) the while:
-- `bench postgres` spent 47 of PostgreSQL's 48 s of INSERT INTO generations in this trigger.
-- Now one statement locks each run it touches, in id order, and adds each (run, category,
-- outcome) count once. (The verdict tally on work_items stays per row: a trigger with a
-- transition table cannot be limited to `UPDATE OF verdict`.)
DROP TRIGGER generations_tally ON generations;
DROP FUNCTION generations_tally();

CREATE FUNCTION generations_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs WHERE id IN (
        SELECT w.run_id FROM new_rows n JOIN work_items w ON w.id = n.work_item_id
    ) ORDER BY id FOR NO KEY UPDATE;
    INSERT INTO run_tallies (run_id, category, field, value, count)
        SELECT w.run_id, w.category, 'outcome', n.outcome, COUNT(*)
        FROM new_rows n JOIN work_items w ON w.id = n.work_item_id
        GROUP BY w.run_id, w.category, n.outcome
        ORDER BY 1, 2, 4
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = run_tallies.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE TRIGGER generations_tally AFTER INSERT ON generations
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION generations_tally();

DROP TRIGGER grades_run_grader ON grades;
DROP FUNCTION grades_run_grader();

CREATE FUNCTION grades_run_grader() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs WHERE id IN (
        SELECT w.run_id FROM new_rows d JOIN work_items w ON w.id = d.work_item_id
        WHERE d.stage = 'deterministic'
    ) ORDER BY id FOR NO KEY UPDATE;
    INSERT INTO run_graders (run_id, grader, count)
        SELECT w.run_id, d.grader, COUNT(*)
        FROM new_rows d JOIN work_items w ON w.id = d.work_item_id
        WHERE d.stage = 'deterministic'
        GROUP BY w.run_id, d.grader
        ORDER BY 1, 2
        ON CONFLICT (run_id, grader) DO UPDATE SET count = run_graders.count + excluded.count;
    RETURN NULL;
END;
$$;

CREATE TRIGGER grades_run_grader AFTER INSERT ON grades
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION grades_run_grader();
