-- Multi-turn conversations: each turn of a conversation is its own result identity, keyed by
-- its turn as well. A later turn waits (state `waiting`, never claimable) until the turn before
-- it is recorded; it then becomes `queued`, or `stopped` when that turn got no answer (an
-- endpoint error or a timeout), since its request would have to carry the missing answer.
ALTER TABLE work_items ADD COLUMN turn BIGINT NOT NULL DEFAULT 1;
ALTER TABLE work_items DROP CONSTRAINT work_items_identity_key;
ALTER TABLE work_items ADD CONSTRAINT work_items_identity_key
    UNIQUE (run_id, revision_id, case_id, checkpoint_id, repetition, turn);
ALTER TABLE work_items DROP CONSTRAINT work_items_state_check;
ALTER TABLE work_items ADD CONSTRAINT work_items_state_check
    CHECK (state IN ('waiting','queued','leased','done','stopped'));
