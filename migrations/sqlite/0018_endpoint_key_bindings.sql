-- Hosts a lead or admin bound an operator's endpoint key (`ARBITER_ENDPOINT_KEY_X`) to, for
-- keys whose `…_HOSTS` variable the operator left unset (the operator's list wins when set).
CREATE TABLE endpoint_key_bindings (
    variable TEXT PRIMARY KEY,     -- ARBITER_ENDPOINT_KEY_…
    hosts    TEXT NOT NULL,        -- host or host:port entries, comma-separated
    set_by   INTEGER REFERENCES users(id),
    set_at   INTEGER NOT NULL
);
