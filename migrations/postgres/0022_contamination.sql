-- Items of a run whose text shares an n-gram with the training corpus its eval names (the
-- GPT-3 paper's 13-gram check), with what was found; reports give scores with and without
-- them. Written while the run expands; a re-expansion finds the rows already there.
CREATE TABLE contamination_flags (
    run_id  BIGINT  NOT NULL REFERENCES runs(id),
    case_id TEXT    NOT NULL,
    ngrams  INTEGER NOT NULL,   -- the item's n-grams
    matched INTEGER NOT NULL,   -- of those, how many the corpus has
    example TEXT,               -- the first one found, as normalised words
    PRIMARY KEY (run_id, case_id)
);
