-- Reports and checkpoint comparisons at a million items: per-category tallies kept up to date
-- by triggers as results arrive (so a report never counts a run's rows), and per-run snapshots
-- (one compact column of verdicts in identity order) that comparisons pair by position.

-- The dataset item's category on each identity: reports and diffs filter by it without a join.
ALTER TABLE work_items ADD COLUMN category TEXT NOT NULL DEFAULT '';
UPDATE work_items w SET category = i.category FROM dataset_items i
    WHERE i.revision_id = w.revision_id AND i.case_id = w.case_id AND i.category <> '';

-- Counts per run, category, field and value:
--   field 'verdict': pass / fail / uncertain / error of the current final verdict;
--   field 'outcome': ok / truncated / empty / refused / endpoint_error / timeout of the answer;
--   field 'changes' (value ''): decided verdicts changed since (a human overturned a grade),
--     so a snapshot knows it is stale even when the counts happen to balance.
CREATE TABLE run_tallies (
    run_id   BIGINT NOT NULL REFERENCES runs(id),
    category TEXT   NOT NULL,
    field    TEXT   NOT NULL CHECK (field IN ('verdict','outcome','changes')),
    value    TEXT   NOT NULL,
    count    BIGINT NOT NULL,
    PRIMARY KEY (run_id, category, field, value)
);

INSERT INTO run_tallies (run_id, category, field, value, count)
    SELECT run_id, category, 'verdict', verdict, COUNT(*) FROM work_items
    WHERE verdict IS NOT NULL GROUP BY run_id, category, verdict;
INSERT INTO run_tallies (run_id, category, field, value, count)
    SELECT w.run_id, w.category, 'outcome', g.outcome, COUNT(*)
    FROM generations g JOIN work_items w ON w.id = g.work_item_id
    GROUP BY w.run_id, w.category, g.outcome;

CREATE FUNCTION run_tally_add(p_run BIGINT, p_category TEXT, p_field TEXT, p_value TEXT, p_delta BIGINT)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO run_tallies (run_id, category, field, value, count)
        VALUES (p_run, p_category, p_field, p_value, p_delta)
        ON CONFLICT (run_id, category, field, value) DO UPDATE SET count = run_tallies.count + excluded.count;
$$;

CREATE FUNCTION work_items_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.verdict IS NOT NULL THEN
            PERFORM run_tally_add(NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1);
        END IF;
    ELSIF OLD.verdict IS DISTINCT FROM NEW.verdict THEN
        IF OLD.verdict IS NOT NULL THEN
            PERFORM run_tally_add(OLD.run_id, OLD.category, 'verdict', OLD.verdict, -1);
            PERFORM run_tally_add(NEW.run_id, NEW.category, 'changes', '', 1);
        END IF;
        IF NEW.verdict IS NOT NULL THEN
            PERFORM run_tally_add(NEW.run_id, NEW.category, 'verdict', NEW.verdict, 1);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER work_items_tally AFTER INSERT OR UPDATE OF verdict ON work_items
    FOR EACH ROW EXECUTE FUNCTION work_items_tally();

CREATE FUNCTION generations_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM run_tally_add(w.run_id, w.category, 'outcome', NEW.outcome, 1)
        FROM work_items w WHERE w.id = NEW.work_item_id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER generations_tally AFTER INSERT ON generations
    FOR EACH ROW EXECUTE FUNCTION generations_tally();

-- A run's results in identity order, packed: built by a scan when a report or comparison
-- needs it and the run's tallies have moved since (`version`), then reused. Comparisons pair
-- two snapshots position by position when their identity lists hash alike.
CREATE TABLE run_snapshots (
    run_id        BIGINT PRIMARY KEY REFERENCES runs(id),
    version       TEXT   NOT NULL,
    identity_hash TEXT   NOT NULL,
    item_count    BIGINT NOT NULL,
    data          BYTEA  NOT NULL,
    built_at      BIGINT NOT NULL,
    build_ms      BIGINT NOT NULL
);

-- A promotion decision: made on complete reports only.
CREATE TABLE promotion_decisions (
    id               BIGSERIAL PRIMARY KEY,
    baseline_run_id  BIGINT NOT NULL REFERENCES runs(id),
    candidate_run_id BIGINT NOT NULL REFERENCES runs(id),
    decision         TEXT   NOT NULL CHECK (decision IN ('promote','reject')),
    note             TEXT   NOT NULL DEFAULT '',
    summary_json     TEXT   NOT NULL,
    decided_by       BIGINT REFERENCES users(id),
    decided_at       BIGINT NOT NULL
);
