-- Human judgments beyond pass/fail: rubrics of typed dimensions, versioned like judges; their
-- guidelines for raters, versioned apart (a clarification does not change what is asked);
-- tasks that ask a rubric, labels that answer it, and the raters' consensus per dimension.

-- A rubric version: its definition as JSON (domain/src/annotation/rubric.rs) and the SHA-256
-- of that JSON, which labels made under it are traced to.
CREATE TABLE rubrics (
    id           INTEGER PRIMARY KEY,
    name         TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    definition   TEXT    NOT NULL,
    content_hash TEXT    NOT NULL,
    note         TEXT    NOT NULL DEFAULT '',
    created_by   INTEGER REFERENCES users(id),
    created_at   INTEGER NOT NULL,
    CONSTRAINT rubrics_name_version_key UNIQUE (name, version)
);

-- Guidelines (markdown) for a rubric name, versioned; raters see the newest beside the item.
CREATE TABLE rubric_guidelines (
    id           INTEGER PRIMARY KEY,
    rubric_name  TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    markdown     TEXT    NOT NULL,
    note         TEXT    NOT NULL DEFAULT '',
    created_by   INTEGER REFERENCES users(id),
    created_at   INTEGER NOT NULL,
    CONSTRAINT rubric_guidelines_name_version_key UNIQUE (rubric_name, version)
);

-- The rubric version a task asks (NULL: pass or fail), and the raters' consensus on each of its
-- dimensions once the task has all its labels (JSON, domain/src/annotation/consensus.rs).
ALTER TABLE annotation_tasks ADD COLUMN rubric_id INTEGER REFERENCES rubrics(id);
ALTER TABLE annotation_tasks ADD COLUMN consensus TEXT;

-- A label's answers to its task's rubric (JSON by dimension key; NULL for a pass/fail label,
-- whose verdict is the answer), and the guidelines version the rater saw. A rater may change
-- their label while its item waits for other raters; edited_at is the latest change.
ALTER TABLE labels ADD COLUMN answers TEXT;
ALTER TABLE labels ADD COLUMN guideline_version INTEGER;
ALTER TABLE labels ADD COLUMN edited_at INTEGER;

-- The label export reads a run's labels item by item, each item's labels in id order.
CREATE INDEX labels_task_id_idx ON labels (task_id, id);
