-- The references from the tables every result writes (work_items to its run, dataset revision
-- and checkpoint; generations and grades to their identity; generation_cache and
-- generation_logprobs to their generation) are checked once per statement instead of once per
-- row. A foreign key runs one lookup query per inserted row, seven per item: `bench postgres`
-- spent about an eighth of PostgreSQL's time in them (700,000 queries for 100,000 items). The
-- checks below run one query per reference and statement, which looks each distinct parent
-- up once and locks it (FOR KEY SHARE, as a foreign key does), so a parent deleted meanwhile
-- is reported missing rather than left with orphans. SQLite keeps its foreign keys: there a
-- check is an in-process index lookup.
--
-- What the foreign keys also refused stays refused, on the same error code (23503):
-- - deleting a parent that still has children (checked once per DELETE statement, which must
--   run at READ COMMITTED, Arbiter's level: only there does the check see children committed
--   while it ran, as a foreign key's does), and emptying it with TRUNCATE;
-- - changing a reference or a parent's key. Arbiter writes both once, so any change is
--   refused (stricter than a foreign key, which lets a reference move to another parent),
--   checked only when an UPDATE sets one of those columns.

-- Every row of the statement (`new_rows`) names a parent that exists.
-- Arguments: the child's column, the parent table, the parent's key column.
CREATE FUNCTION references_exist() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    -- One index probe per distinct key (the locking subquery is never turned into a hash
    -- join over the whole parent table); the first key without a parent, if any.
    EXECUTE format(
        'SELECT n.key::text FROM (SELECT DISTINCT %1$I AS key FROM new_rows WHERE %1$I IS NOT NULL) n '
        'WHERE NOT EXISTS (SELECT 1 FROM %2$I p WHERE p.%3$I = n.key FOR KEY SHARE) LIMIT 1',
        TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]) INTO missing;
    IF missing IS NOT NULL THEN
        RAISE foreign_key_violation USING MESSAGE = format(
            'insert on table "%s" violates its reference: key (%s)=(%s) is not present in table "%s"',
            TG_TABLE_NAME, TG_ARGV[0], missing, TG_ARGV[1]);
    END IF;
    RETURN NULL;
END;
$$;

-- No row of the statement's deleted parents (`old_rows`) is still referenced; before a
-- TRUNCATE, no child is left at all.
-- Arguments: the parent's key column, the child table, the child's column.
CREATE FUNCTION references_gone() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    still text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        EXECUTE format('SELECT c.%2$I::text FROM %1$I c LIMIT 1', TG_ARGV[1], TG_ARGV[2]) INTO still;
    ELSE
        -- A snapshot taken before the DELETE (REPEATABLE READ, SERIALIZABLE) misses children
        -- committed since, and would leave them orphaned.
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE invalid_transaction_state USING MESSAGE = format(
                'delete from table "%s" must run at READ COMMITTED isolation, where the check of '
                'its references sees rows committed meanwhile', TG_TABLE_NAME);
        END IF;
        EXECUTE format(
            'SELECT o.%1$I::text FROM old_rows o WHERE EXISTS (SELECT 1 FROM %2$I c WHERE c.%3$I = o.%1$I) LIMIT 1',
            TG_ARGV[0], TG_ARGV[1], TG_ARGV[2]) INTO still;
    END IF;
    IF still IS NOT NULL THEN
        RAISE foreign_key_violation USING MESSAGE = format(
            '%s on table "%s" violates a reference: key (%s)=(%s) is still referenced from table "%s"',
            lower(TG_OP), TG_TABLE_NAME, TG_ARGV[0], still, TG_ARGV[1]);
    END IF;
    RETURN NULL;
END;
$$;

-- References and the keys they point at are written once.
CREATE FUNCTION references_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE foreign_key_violation USING MESSAGE = format(
        'update on table "%s" changes a reference or a referenced key (%s), which never change',
        TG_TABLE_NAME, TG_ARGV[0]);
END;
$$;

ALTER TABLE work_items
    DROP CONSTRAINT work_items_run_id_fkey,
    DROP CONSTRAINT work_items_revision_id_fkey,
    DROP CONSTRAINT work_items_checkpoint_id_fkey;
ALTER TABLE generations DROP CONSTRAINT generations_work_item_id_fkey;
ALTER TABLE grades DROP CONSTRAINT grades_work_item_id_fkey;
ALTER TABLE generation_cache DROP CONSTRAINT generation_cache_work_item_id_fkey;
ALTER TABLE generation_logprobs DROP CONSTRAINT generation_logprobs_work_item_id_fkey;

CREATE TRIGGER work_items_run_exists AFTER INSERT ON work_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('run_id', 'runs', 'id');
CREATE TRIGGER work_items_revision_exists AFTER INSERT ON work_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('revision_id', 'dataset_revisions', 'id');
CREATE TRIGGER work_items_checkpoint_exists AFTER INSERT ON work_items
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('checkpoint_id', 'checkpoints', 'id');
CREATE TRIGGER generations_work_item_exists AFTER INSERT ON generations
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('work_item_id', 'work_items', 'id');
CREATE TRIGGER grades_work_item_exists AFTER INSERT ON grades
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('work_item_id', 'work_items', 'id');
CREATE TRIGGER generation_cache_generation_exists AFTER INSERT ON generation_cache
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('work_item_id', 'generations', 'work_item_id');
CREATE TRIGGER generation_logprobs_generation_exists AFTER INSERT ON generation_logprobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_exist('work_item_id', 'generations', 'work_item_id');

CREATE TRIGGER runs_work_items_gone AFTER DELETE ON runs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('id', 'work_items', 'run_id');
CREATE TRIGGER dataset_revisions_work_items_gone AFTER DELETE ON dataset_revisions
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('id', 'work_items', 'revision_id');
CREATE TRIGGER checkpoints_work_items_gone AFTER DELETE ON checkpoints
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('id', 'work_items', 'checkpoint_id');
CREATE TRIGGER work_items_generations_gone AFTER DELETE ON work_items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('id', 'generations', 'work_item_id');
CREATE TRIGGER work_items_grades_gone AFTER DELETE ON work_items
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('id', 'grades', 'work_item_id');
CREATE TRIGGER generations_cache_gone AFTER DELETE ON generations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('work_item_id', 'generation_cache', 'work_item_id');
CREATE TRIGGER generations_logprobs_gone AFTER DELETE ON generations
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    EXECUTE FUNCTION references_gone('work_item_id', 'generation_logprobs', 'work_item_id');

-- TRUNCATE fires no DELETE trigger; it is refused while the children it would orphan exist.
CREATE TRIGGER runs_work_items_kept BEFORE TRUNCATE ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('id', 'work_items', 'run_id');
CREATE TRIGGER dataset_revisions_work_items_kept BEFORE TRUNCATE ON dataset_revisions
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('id', 'work_items', 'revision_id');
CREATE TRIGGER checkpoints_work_items_kept BEFORE TRUNCATE ON checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('id', 'work_items', 'checkpoint_id');
CREATE TRIGGER work_items_generations_kept BEFORE TRUNCATE ON work_items
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('id', 'generations', 'work_item_id');
CREATE TRIGGER work_items_grades_kept BEFORE TRUNCATE ON work_items
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('id', 'grades', 'work_item_id');
CREATE TRIGGER generations_cache_kept BEFORE TRUNCATE ON generations
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('work_item_id', 'generation_cache', 'work_item_id');
CREATE TRIGGER generations_logprobs_kept BEFORE TRUNCATE ON generations
    FOR EACH STATEMENT EXECUTE FUNCTION references_gone('work_item_id', 'generation_logprobs', 'work_item_id');

-- AFTER, not BEFORE: a BEFORE row trigger locks every row an UPDATE touches before its WHEN is
-- evaluated, which would add a lock to each claim and commit. `UPDATE OF` and WHEN keep the
-- function out of every statement that leaves these columns as they are.
CREATE TRIGGER work_items_references_fixed AFTER UPDATE OF id, run_id, revision_id, checkpoint_id ON work_items
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id OR OLD.run_id IS DISTINCT FROM NEW.run_id
        OR OLD.revision_id IS DISTINCT FROM NEW.revision_id OR OLD.checkpoint_id IS DISTINCT FROM NEW.checkpoint_id)
    EXECUTE FUNCTION references_fixed('id, run_id, revision_id, checkpoint_id');
CREATE TRIGGER generations_references_fixed AFTER UPDATE OF work_item_id ON generations
    FOR EACH ROW WHEN (OLD.work_item_id IS DISTINCT FROM NEW.work_item_id)
    EXECUTE FUNCTION references_fixed('work_item_id');
CREATE TRIGGER grades_references_fixed AFTER UPDATE OF work_item_id ON grades
    FOR EACH ROW WHEN (OLD.work_item_id IS DISTINCT FROM NEW.work_item_id)
    EXECUTE FUNCTION references_fixed('work_item_id');
CREATE TRIGGER generation_cache_references_fixed AFTER UPDATE OF work_item_id ON generation_cache
    FOR EACH ROW WHEN (OLD.work_item_id IS DISTINCT FROM NEW.work_item_id)
    EXECUTE FUNCTION references_fixed('work_item_id');
CREATE TRIGGER generation_logprobs_references_fixed AFTER UPDATE OF work_item_id ON generation_logprobs
    FOR EACH ROW WHEN (OLD.work_item_id IS DISTINCT FROM NEW.work_item_id)
    EXECUTE FUNCTION references_fixed('work_item_id');
CREATE TRIGGER runs_key_fixed AFTER UPDATE OF id ON runs
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION references_fixed('id');
CREATE TRIGGER dataset_revisions_key_fixed AFTER UPDATE OF id ON dataset_revisions
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION references_fixed('id');
CREATE TRIGGER checkpoints_key_fixed AFTER UPDATE OF id ON checkpoints
    FOR EACH ROW WHEN (OLD.id IS DISTINCT FROM NEW.id)
    EXECUTE FUNCTION references_fixed('id');
