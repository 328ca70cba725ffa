-- Who may act on what, checked on the object itself.

-- A rater's claim on an item is named in the browser by a random handle, new for every claim,
-- never by the task id (a gold item's real, usually old, id would give it away).
ALTER TABLE task_leases ADD COLUMN handle TEXT;
CREATE UNIQUE INDEX task_leases_handle_key ON task_leases (handle);

-- A label waiting for review is served to one reviewer at a time, who alone may decide it;
-- the claim lapses at review_served_until and the label goes to the next reviewer who asks.
ALTER TABLE labels ADD COLUMN review_served_to BIGINT REFERENCES users(id);
ALTER TABLE labels ADD COLUMN review_served_until BIGINT;
