-- When a run's launch last wrote a chunk of its identities. Workers answer a run that is
-- still expanding only while this is recent: a launch that died part-way (a restart, a lost
-- connection) leaves its run expanding, and that run waits for a relaunch to finish
-- planning it instead of being worked, unfinishable, meanwhile.
ALTER TABLE runs ADD COLUMN planned_at BIGINT;
