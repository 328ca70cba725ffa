-- How workers authenticate to an endpoint: `env:VARIABLE` (the key lives in the workers'
-- environment) or `sealed:v1:…` (encrypted with ARBITER_SECRET_KEY). Never a key in clear.
ALTER TABLE endpoints ADD COLUMN api_key_ref TEXT;

-- Webhooks: HTTP POSTs to a receiver when runs complete and alerts open or resolve.
CREATE TABLE webhooks (
    id         INTEGER PRIMARY KEY,
    url        TEXT    NOT NULL,
    -- Comma-separated: run.completed, alert.raised, alert.resolved.
    events     TEXT    NOT NULL,
    -- The signing secret, sealed (NULL: deliveries are unsigned).
    secret_ref TEXT,
    -- Events up to this time (Unix ms) have been queued for delivery.
    cursor_ms  INTEGER NOT NULL,
    created_by INTEGER REFERENCES users(id),
    created_at INTEGER NOT NULL
);

-- The outbox: one row per (webhook, event), delivered with retries by any server.
CREATE TABLE webhook_deliveries (
    id              INTEGER PRIMARY KEY,
    webhook_id      INTEGER NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event           TEXT    NOT NULL,
    event_key       TEXT    NOT NULL,   -- e.g. run.completed:12
    payload         TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    delivered_at    INTEGER,
    failed_at       INTEGER,            -- gave up after the last attempt
    last_status     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    CONSTRAINT webhook_deliveries_event_key UNIQUE (webhook_id, event_key)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
-- Runs finished after a webhook's cursor.
CREATE INDEX runs_finished_idx ON runs (finished_at);
