-- An answer's wait inside Arbiter for a request slot, apart from its time at the endpoint
-- (latency_ms, which no longer counts that wait). NULL for answers recorded before.
ALTER TABLE generations ADD COLUMN waited_ms INTEGER;

-- Each worker's load per run every two seconds, for the run page's load chart: identities
-- claimed, of which waiting inside Arbiter for a slot, requests at the endpoints, the worker's
-- request limit, the servers' own queue, the period's answers with their times, and the
-- identities finished. Kept with
-- the run (deleted with it), so no foreign key holds up other deletions.
CREATE TABLE run_load_samples (
    run_id         INTEGER  NOT NULL,
    worker         TEXT    NOT NULL,
    taken_at       INTEGER  NOT NULL,
    claimed        INTEGER  NOT NULL,
    waiting        INTEGER  NOT NULL,
    sending        INTEGER  NOT NULL,
    request_limit  INTEGER  NOT NULL,
    server_waiting REAL,
    answers        INTEGER  NOT NULL,
    latency_ms_sum INTEGER  NOT NULL,
    latency_ms_max INTEGER  NOT NULL,
    waited_ms_sum  INTEGER  NOT NULL,
    -- identities the worker handed to its committer in the period (the run's pace)
    finished       INTEGER  NOT NULL,
    PRIMARY KEY (run_id, taken_at, worker)
);

-- Counters the run page's progress reads instead of counting a run's rows on every poll, kept
-- in the transaction that records the answers: answers from the cache (from_cache) and failed
-- answers per error category (error_category:<category>); and the run's latest error.
CREATE TABLE run_counts (
    run_id INTEGER NOT NULL,
    name   TEXT   NOT NULL,
    count  INTEGER NOT NULL,
    PRIMARY KEY (run_id, name)
);
INSERT INTO run_counts (run_id, name, count)
    SELECT w.run_id, 'from_cache', COUNT(*) FROM generations g JOIN work_items w ON w.id = g.work_item_id
    WHERE g.from_cache = 1 GROUP BY w.run_id;
INSERT INTO run_counts (run_id, name, count)
    SELECT w.run_id, 'error_category:' || g.error_category, COUNT(*) FROM generations g JOIN work_items w ON w.id = g.work_item_id
    WHERE g.error_category IS NOT NULL GROUP BY w.run_id, g.error_category;
ALTER TABLE runs ADD COLUMN last_error TEXT;
UPDATE runs SET last_error = (
    SELECT g.error FROM generations g JOIN work_items w ON w.id = g.work_item_id
    WHERE w.run_id = runs.id AND g.error IS NOT NULL ORDER BY g.created_at DESC LIMIT 1);

-- A run's claimed identities counted for its progress from the few leased rows, not its all.
CREATE INDEX work_items_leased_run_idx ON work_items (run_id) WHERE state = 'leased';
