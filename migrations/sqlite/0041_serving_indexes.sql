-- Workers ask for claimable runs often: a served checkpoint's runs are claimable only while
-- it has a healthy launch, and launchers look for running runs by checkpoint every second.
CREATE INDEX server_launches_checkpoint_state_idx ON server_launches (checkpoint_id, state);
CREATE INDEX runs_checkpoint_status_idx ON runs (checkpoint_id, status);
