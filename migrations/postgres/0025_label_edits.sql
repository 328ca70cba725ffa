-- A rater may change their own label while its item waits for other raters' labels; the time
-- of the latest change is kept with the label (NULL: never changed).
ALTER TABLE labels ADD COLUMN edited_at BIGINT;
