-- Checkpoints whose model servers Arbiter starts and retires itself.
--
-- A launcher (a process given launcher settings) announces itself here with the host its
-- servers listen on, its engines and its port range, and keeps a heartbeat; registrations
-- pick a live one that offers the engine.
CREATE TABLE serving_launchers (
    id           TEXT   PRIMARY KEY,
    host         TEXT   NOT NULL,
    engines      TEXT   NOT NULL, -- JSON list of engine names
    port_first   INTEGER NOT NULL,
    port_last    INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);

-- What a served checkpoint is started with: its launcher, engine, weights and serving plan.
CREATE TABLE served_checkpoints (
    checkpoint_id INTEGER PRIMARY KEY REFERENCES checkpoints(id),
    launcher_id   TEXT   NOT NULL REFERENCES serving_launchers(id),
    engine        TEXT   NOT NULL,
    model_path    TEXT   NOT NULL,
    plan          TEXT   NOT NULL -- JSON ServingPlan
);

-- Each replica's port, reserved for its checkpoint so the URLs frozen in its runs' manifests
-- stay right across relaunches; freed when a retracted checkpoint's servers retire.
CREATE TABLE served_ports (
    launcher_id   TEXT   NOT NULL REFERENCES serving_launchers(id),
    port          INTEGER NOT NULL,
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),
    replica       INTEGER NOT NULL,
    PRIMARY KEY (launcher_id, port)
);
CREATE INDEX served_ports_checkpoint_idx ON served_ports (checkpoint_id, replica);

-- Each launch of a served checkpoint's servers. Its runs are worked only while it is healthy.
CREATE TABLE server_launches (
    id            INTEGER PRIMARY KEY,
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),
    state         TEXT   NOT NULL CHECK (state IN ('requested','starting','healthy','restarting','retired','failed','held')),
    requested_at  INTEGER NOT NULL,
    started_at    INTEGER,
    healthy_at    INTEGER,
    ended_at      INTEGER,
    restarts      INTEGER NOT NULL DEFAULT 0,
    failure       TEXT,
    log_tail      TEXT,
    -- The serving canary's reading on a checkpoint's first launch (JSON); a launch whose
    -- canary was far from its predecessor's is 'held', its runs paused with the reason.
    canary        TEXT
);
-- One live launch per checkpoint: "load once, run everything".
CREATE UNIQUE INDEX server_launches_live_idx ON server_launches (checkpoint_id)
    WHERE state IN ('requested','starting','healthy','restarting');
