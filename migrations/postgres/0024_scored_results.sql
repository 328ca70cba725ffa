-- Rolling log-likelihood (perplexity, bits per byte): an identity can be scored without a
-- verdict. Its answer is a number, not right or wrong, so it is recorded as verdict `scored`
-- and decided by `scored`: done and decided, never an error, never in a pass rate.
ALTER TABLE work_items DROP CONSTRAINT work_items_verdict_check;
ALTER TABLE work_items ADD CONSTRAINT work_items_verdict_check
    CHECK (verdict IN ('pass','fail','uncertain','error','scored'));
ALTER TABLE work_items DROP CONSTRAINT work_items_decided_by_check;
ALTER TABLE work_items ADD CONSTRAINT work_items_decided_by_check
    CHECK (decided_by IN ('deterministic','cheap_judge','strong_judge','human','pending','error','scored'));
