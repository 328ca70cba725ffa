-- PostgreSQL's tally triggers on generations and grades now run once per statement. SQLite has
-- only row triggers, and one writer: nothing changes here.
SELECT 1;
