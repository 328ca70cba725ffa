-- Uploads of any size, within the operator's limits: a file is parsed as it streams in and its
-- items are staged here in short transactions, invisible to everything else. When the whole
-- file has been read and checked, one transaction makes them a revision (or, for content seen
-- before, makes that revision current again) and clears the stage; a refused or interrupted
-- upload leaves nothing behind but its stage, which is cleared then (or by the next upload a
-- day later, if the process died).
CREATE TABLE dataset_uploads (
    id          INTEGER PRIMARY KEY,
    source_name TEXT    NOT NULL,
    created_by  INTEGER REFERENCES users(id),
    started_at  INTEGER NOT NULL
);
CREATE TABLE staged_items (
    upload_id INTEGER NOT NULL REFERENCES dataset_uploads(id),
    position  INTEGER NOT NULL,
    case_id   TEXT    NOT NULL,
    input     TEXT    NOT NULL,
    target    TEXT    NOT NULL,
    category  TEXT    NOT NULL DEFAULT '',
    fields    TEXT,
    PRIMARY KEY (upload_id, position)
);
