-- PostgreSQL now checks the references of the tables every result writes once per statement
-- instead of with a foreign key per row. SQLite keeps its foreign keys (a check is an
-- in-process index lookup there): nothing changes here.
SELECT 1;
