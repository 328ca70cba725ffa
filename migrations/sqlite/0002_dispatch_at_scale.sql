-- Dispatch at scale: compact logprobs, lean queue indexes, run counters, observed lengths,
-- team weights and an index for streaming expansion (measured with `arbiter bench`).

-- Per-token logprobs move from the endpoint's JSON text (about 7 KB for 32 tokens with five
-- alternatives) to the compact binary form of engine/src/logprobs.rs (about a fifth of that),
-- in a table of their own: kept inline they made a generation row ten times wider, so every
-- read of answers (cache lookups, reports, comparisons) paged through them.
ALTER TABLE generations DROP COLUMN logprobs_json;
CREATE TABLE generation_logprobs (
    work_item_id INTEGER PRIMARY KEY REFERENCES generations(work_item_id),
    logprobs     BLOB  NOT NULL
);

-- The queue indexes hold only the rows they serve: queued identities (claimed longest first)
-- and leased ones (heartbeats, the reaper, completion checks; as many as are in flight). An
-- identity passing queued -> leased -> done now touches each index once instead of
-- rewriting two full-table indexes at every step.
DROP INDEX work_items_lease_idx;
DROP INDEX work_items_claim_idx;
CREATE INDEX work_items_queued_idx ON work_items (run_id, cost DESC, id) WHERE state = 'queued';
CREATE INDEX work_items_leased_idx ON work_items (lease_owner) WHERE state = 'leased';

-- Identities recorded so far, kept in the same transaction as the results, so run lists
-- never count a run's rows.
ALTER TABLE runs ADD COLUMN done_count INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET done_count = (SELECT COUNT(*) FROM work_items w WHERE w.run_id = runs.id AND w.state = 'done');

-- Mean completion length observed per case, merged in when a run completes: later runs of
-- the same cases claim the longest first by what was seen, not only by prompt length.
CREATE TABLE case_lengths (
    revision_id       INTEGER NOT NULL REFERENCES dataset_revisions(id),
    case_id           TEXT   NOT NULL,
    completion_tokens REAL NOT NULL,
    samples           INTEGER NOT NULL,
    PRIMARY KEY (revision_id, case_id)
);

-- Fair-share weights between teams on shared endpoints (a team without a row weighs 1).
CREATE TABLE team_weights (
    team   TEXT PRIMARY KEY,
    weight REAL NOT NULL CHECK (weight > 0)
);

-- Expansion reads a revision's items in file order, a chunk at a time: without this index each
-- chunk scanned and sorted the whole revision (quadratic; a minute for a million items).
CREATE UNIQUE INDEX dataset_items_position_idx ON dataset_items (revision_id, position);
