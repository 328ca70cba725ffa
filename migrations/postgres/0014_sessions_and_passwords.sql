-- Sessions that end when they should, and passwords their owners choose.
-- session_epoch: a session is valid only while it carries its user's current epoch; changing
-- or resetting the password moves the epoch on, which ends every other session at once.
ALTER TABLE users ADD COLUMN session_epoch BIGINT NOT NULL DEFAULT 0;
-- must_change_password: the first password was chosen by someone else (an invitation): the
-- user must choose their own before doing anything else.
ALTER TABLE users ADD COLUMN must_change_password BOOLEAN NOT NULL DEFAULT FALSE;
