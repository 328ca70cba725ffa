-- Rater hours and pay. A pay pool pays per answer or per payable hour; its rate, and which
-- pool a rater is in, change from a given UTC day on (days since 1970-01-01), so a period
-- already paid is priced the same however rates change later. Time on task is each answer's
-- `duration_ms` (claim to submission), capped by the rate's idle cap.
CREATE TABLE pay_pools (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    CONSTRAINT pay_pools_name_key UNIQUE (name)
);

CREATE TABLE pay_rates (
    id                INTEGER PRIMARY KEY,
    pool_id           INTEGER NOT NULL REFERENCES pay_pools(id),
    basis             TEXT    NOT NULL CHECK (basis IN ('answer','hour')),
    rate_minor        INTEGER NOT NULL CHECK (rate_minor >= 0),   -- cents per answer or hour
    currency          TEXT    NOT NULL,                           -- ISO 4217
    idle_cap_minutes  INTEGER NOT NULL CHECK (idle_cap_minutes BETWEEN 1 AND 240),
    effective_day     INTEGER NOT NULL,
    set_by            INTEGER REFERENCES users(id),
    created_at        INTEGER NOT NULL,
    -- Setting a pool's rate again for the same day replaces it.
    CONSTRAINT pay_rates_pool_day_key UNIQUE (pool_id, effective_day)
);

CREATE TABLE pay_assignments (
    id             INTEGER PRIMARY KEY,
    rater_id       INTEGER NOT NULL REFERENCES users(id),
    pool_id        INTEGER REFERENCES pay_pools(id),              -- NULL: unpaid from that day
    effective_day  INTEGER NOT NULL,
    set_by         INTEGER REFERENCES users(id),
    created_at     INTEGER NOT NULL,
    CONSTRAINT pay_assignments_rater_day_key UNIQUE (rater_id, effective_day)
);

-- The ledger sums each rater's answers per day over a range of days (labels have such an
-- index since 0005).
CREATE INDEX preference_labels_created_idx ON preference_labels (created_at);
CREATE INDEX gold_answers_created_idx ON gold_answers (created_at);
