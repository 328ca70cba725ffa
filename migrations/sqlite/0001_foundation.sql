-- Arbiter's foundation schema (SQLite). The PostgreSQL twin in migrations/postgres/ has the same
-- logical schema; keep them in step. Times are Unix milliseconds (INTEGER) in both backends so
-- that the store code is identical; booleans are 0/1.

-- People and their single role (annotator, reviewer, researcher, lead, admin).
CREATE TABLE users (
    id            INTEGER PRIMARY KEY,
    username      TEXT    NOT NULL,
    password_hash TEXT    NOT NULL,            -- Argon2id PHC string; never leaves the server
    role          TEXT    NOT NULL CHECK (role IN ('annotator','reviewer','researcher','lead','admin')),
    team          TEXT    NOT NULL DEFAULT 'default', -- fair-share group on shared endpoints
    created_at    INTEGER NOT NULL,
    CONSTRAINT users_username_key UNIQUE (username)
);

-- An OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp, arbiter sim) reachable at base_url.
CREATE TABLE endpoints (
    id          INTEGER PRIMARY KEY,
    base_url    TEXT    NOT NULL,              -- e.g. http://127.0.0.1:8001/v1
    max_in_flight INTEGER NOT NULL DEFAULT 256,    -- requests in flight from all workers together
    token_budget  INTEGER,                         -- prompt + max tokens in flight; NULL = no budget
    created_at  INTEGER NOT NULL,
    CONSTRAINT endpoints_base_url_key UNIQUE (base_url)
);

-- A model checkpoint as served by one endpoint under a served-model name.
CREATE TABLE checkpoints (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,              -- researcher-facing name
    endpoint_id INTEGER NOT NULL REFERENCES endpoints(id),
    model       TEXT    NOT NULL,              -- the `model` field sent to the endpoint
    engine_build    TEXT NOT NULL DEFAULT '',  -- user-declared, part of the cache fingerprint
    parallel_layout TEXT NOT NULL DEFAULT '',  -- e.g. tp=4,pp=1; part of the fingerprint
    fallback_checkpoint_id INTEGER REFERENCES checkpoints(id), -- tried once after retries run out
    created_by  INTEGER REFERENCES users(id),
    created_at  INTEGER NOT NULL,
    CONSTRAINT checkpoints_name_key UNIQUE (name)
);

-- Further replicas serving the same checkpoint; requests go to the least loaded one.
CREATE TABLE checkpoint_replicas (
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),
    endpoint_id   INTEGER NOT NULL REFERENCES endpoints(id),
    PRIMARY KEY (checkpoint_id, endpoint_id)
);

CREATE TABLE datasets (
    id          INTEGER PRIMARY KEY,
    name        TEXT    NOT NULL,
    created_by  INTEGER REFERENCES users(id),
    created_at  INTEGER NOT NULL,
    CONSTRAINT datasets_name_key UNIQUE (name)
);

-- An immutable snapshot of a dataset; content_hash is SHA-256 over the canonical items.
CREATE TABLE dataset_revisions (
    id           INTEGER PRIMARY KEY,
    dataset_id   INTEGER NOT NULL REFERENCES datasets(id),
    content_hash TEXT    NOT NULL,
    item_count   INTEGER NOT NULL,
    source_name  TEXT    NOT NULL,             -- uploaded file name, for the researcher's memory
    created_by   INTEGER REFERENCES users(id),
    created_at   INTEGER NOT NULL,
    -- Latest upload of this content: re-uploading an older revision makes it current again.
    uploaded_at  INTEGER NOT NULL,
    CONSTRAINT dataset_revisions_hash_key UNIQUE (dataset_id, content_hash)
);

CREATE TABLE dataset_items (
    revision_id INTEGER NOT NULL REFERENCES dataset_revisions(id),
    case_id     TEXT    NOT NULL,
    position    INTEGER NOT NULL,              -- order in the uploaded file
    input       TEXT    NOT NULL,
    target      TEXT    NOT NULL,
    category    TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (revision_id, case_id)
);

-- An eval definition: what to ask and how to grade. Versioned by its row; edits create new evals.
CREATE TABLE evals (
    id              INTEGER PRIMARY KEY,
    name            TEXT    NOT NULL,
    dataset_id      INTEGER NOT NULL REFERENCES datasets(id),
    prompt_template TEXT    NOT NULL,          -- contains {input}
    grader          TEXT    NOT NULL,          -- grader id@version, e.g. exact_match@1
    max_tokens      INTEGER NOT NULL,
    temperature     DOUBLE PRECISION NOT NULL,
    repetitions     INTEGER NOT NULL,
    seed            INTEGER NOT NULL,
    created_by      INTEGER REFERENCES users(id),
    created_at      INTEGER NOT NULL,
    CONSTRAINT evals_name_key UNIQUE (name)
);

-- A launched eval: the frozen manifest (JSON) and its content hash, which is the run's identity.
CREATE TABLE runs (
    id             INTEGER PRIMARY KEY,
    manifest_hash  TEXT    NOT NULL,
    manifest_json  TEXT    NOT NULL,
    eval_id        INTEGER NOT NULL REFERENCES evals(id),
    revision_id    INTEGER NOT NULL REFERENCES dataset_revisions(id),
    checkpoint_id  INTEGER NOT NULL REFERENCES checkpoints(id),
    expected_count INTEGER NOT NULL,
    -- expanding: identities being written (not yet claimable); paused/cancelled: not claimed.
    status         TEXT    NOT NULL CHECK (status IN ('expanding','running','paused','cancelled','completed')),
    priority       INTEGER NOT NULL DEFAULT 1,    -- 0 ablation, 1 scheduled, 2 promotion decision
    team           TEXT    NOT NULL DEFAULT 'default',
    created_by     INTEGER REFERENCES users(id),
    created_at     INTEGER NOT NULL,
    finished_at    INTEGER,
    CONSTRAINT runs_manifest_hash_key UNIQUE (manifest_hash)
);

-- Result identities and the work queue in one table, so that recording a result and finishing
-- its work item commit together. The identity is (revision, case, checkpoint, repetition) under
-- one frozen manifest (run).
CREATE TABLE work_items (
    id               INTEGER PRIMARY KEY,
    run_id           INTEGER NOT NULL REFERENCES runs(id),
    revision_id      INTEGER NOT NULL REFERENCES dataset_revisions(id),
    case_id          TEXT    NOT NULL,
    checkpoint_id    INTEGER NOT NULL REFERENCES checkpoints(id),
    repetition       INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued','leased','done')),
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    attempts         INTEGER NOT NULL DEFAULT 0,   -- claims so far; retries never create new samples
    verdict          TEXT CHECK (verdict IN ('pass','fail','uncertain','error')),  -- current final verdict
    cost             INTEGER NOT NULL DEFAULT 0,  -- expected tokens; claimed longest first
    shard            INTEGER NOT NULL DEFAULT 0,  -- stable hash of the case id, modulo 1024
    generation_key   TEXT,                        -- content hash keying generation_cache
    CONSTRAINT work_items_identity_key UNIQUE (run_id, revision_id, case_id, checkpoint_id, repetition)
);
CREATE INDEX work_items_lease_idx ON work_items (state, lease_expires_at);
-- Claims take a run's queued identities longest first: this order, straight from the index.
CREATE INDEX work_items_claim_idx ON work_items (run_id, state, cost DESC, id);

-- One model answer per result identity (the unique key makes a second commit a no-op).
CREATE TABLE generations (
    work_item_id      INTEGER PRIMARY KEY REFERENCES work_items(id),
    outcome           TEXT    NOT NULL CHECK (outcome IN ('ok','truncated','empty','refused','endpoint_error','timeout')),
    output            TEXT    NOT NULL,        -- '' when there was no answer
    finish_reason     TEXT,
    error             TEXT,                    -- what went wrong, for endpoint_error and timeout
    error_category    TEXT,                    -- connect, timeout, rate_limited, server_error, …
    attempt_log       TEXT,                    -- JSON list of failed attempts (category, status, ms)
    served_by         TEXT,                    -- endpoint URL that answered
    model_used        TEXT,                    -- the `model` the endpoint reported
    fallback_used     BOOLEAN NOT NULL DEFAULT FALSE,
    from_cache        BOOLEAN NOT NULL DEFAULT FALSE,
    -- For cache hits: the generation this answer was copied from (its logprobs live there).
    source_work_item_id INTEGER REFERENCES generations(work_item_id),
    latency_ms        INTEGER NOT NULL,        -- including retries
    attempts          INTEGER NOT NULL,        -- HTTP attempts made
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    logprobs_json     TEXT,                    -- per-token logprobs as the endpoint returned them
    created_at        INTEGER NOT NULL
);

-- Throughput on the run page counts generations of the last minute.
CREATE INDEX generations_created_idx ON generations (created_at);

-- Content-addressed generations: key = hash(endpoint fingerprint, rendered prompt, sampling
-- parameters, seed, repetition) → the generation that answered it first. An unchanged
-- manifest re-run is answered from here; answers are stored once, in `generations`.
CREATE TABLE generation_cache (
    generation_key TEXT    PRIMARY KEY,
    work_item_id   INTEGER NOT NULL REFERENCES generations(work_item_id),
    created_at     INTEGER NOT NULL
);

-- Live worker processes; heartbeats divide each endpoint's in-flight limit among them.
CREATE TABLE workers (
    name         TEXT    PRIMARY KEY,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    in_flight    INTEGER NOT NULL DEFAULT 0
);

-- Every grade given to a result: by a grader version or by a human label.
CREATE TABLE grades (
    id               INTEGER PRIMARY KEY,
    work_item_id     INTEGER NOT NULL REFERENCES work_items(id),
    grader           TEXT    NOT NULL,         -- exact_match@1, human
    verdict          TEXT    NOT NULL CHECK (verdict IN ('pass','fail','uncertain')),
    extracted_answer TEXT,
    reason           TEXT    NOT NULL,
    created_at       INTEGER NOT NULL
);
CREATE INDEX grades_work_item_idx ON grades (work_item_id);

-- Items a grader could not decide, waiting for a human.
CREATE TABLE annotation_tasks (
    id               INTEGER PRIMARY KEY,
    work_item_id     INTEGER NOT NULL REFERENCES work_items(id),
    reason           TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('open','leased','done')),
    leased_by        INTEGER REFERENCES users(id),
    lease_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    CONSTRAINT annotation_tasks_work_item_key UNIQUE (work_item_id)
);
CREATE INDEX annotation_tasks_state_idx ON annotation_tasks (state, id);

CREATE TABLE labels (
    id           INTEGER PRIMARY KEY,
    task_id      INTEGER NOT NULL REFERENCES annotation_tasks(id),
    annotator_id INTEGER NOT NULL REFERENCES users(id),
    verdict      TEXT    NOT NULL CHECK (verdict IN ('pass','fail')),
    rationale    TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    CONSTRAINT labels_task_annotator_key UNIQUE (task_id, annotator_id)
);

-- Skips, so that "next item" does not offer a rater the item they just skipped.
CREATE TABLE annotation_skips (
    task_id    INTEGER NOT NULL REFERENCES annotation_tasks(id),
    user_id    INTEGER NOT NULL REFERENCES users(id),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, user_id)
);
