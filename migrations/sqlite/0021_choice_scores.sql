-- Likelihood evals score every choice of an item instead of generating an answer: each
-- identity's answer keeps its choices' scores (log-likelihood, tokens, lengths, greediness)
-- and the right choices, as JSON, so reports can read acc, acc_norm and acc_bytes, and the
-- probability on the right answer. NULL for generated answers.
ALTER TABLE generations ADD COLUMN scores TEXT;
