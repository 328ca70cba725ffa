-- An instruction-following grade (IFEval) keeps each instruction's result, read strictly and
-- loosely, as JSON: the verdict is prompt-level strict, and reports read the instruction-level
-- and loose accuracies from here. NULL for every other grade.
ALTER TABLE grades ADD COLUMN instructions TEXT;
