-- Items with any fields: an item not of the original four-field shape keeps all of its fields
-- (its id excepted) as a JSON object here; `input`, `target` and `category` then hold what
-- tables and raters show. NULL for four-field items, whose fields are those three columns.
ALTER TABLE dataset_items ADD COLUMN fields TEXT;

-- An eval's prompt parts beyond its template (template syntax, system prompt, message list,
-- API, field mapping) as JSON; NULL for an eval of the original shape.
ALTER TABLE evals ADD COLUMN prompt_options TEXT;

-- Sampling settings beyond max_tokens, temperature and seed (top_p, stop, extra engine
-- parameters) as JSON; NULL when none are set.
ALTER TABLE evals ADD COLUMN sampling_options TEXT;
