-- Grading and confidence triage: graders described as data, LLM judges whose confidence comes
-- from logprobs, a versioned triage policy per eval, a grade cache and cost per call.

-- Evals store their deterministic grader as a JSON spec (engine/src/grading/deterministic.rs);
-- the foundation's only grader becomes its spec.
UPDATE evals SET grader = '{"kind":"exact_match"}' WHERE grader = 'exact_match@1';

-- What a model call costs: USD per million prompt and completion tokens, per checkpoint (one
-- server often serves several models at different prices).
ALTER TABLE checkpoints ADD COLUMN input_usd_per_mtok REAL NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN output_usd_per_mtok REAL NOT NULL DEFAULT 0;
-- The generation's cost at its checkpoint's prices when it was made; NULL for cache hits (free)
-- and errors.
ALTER TABLE generations ADD COLUMN cost_usd REAL;

-- A judge: a checkpoint plus a rubric prompt. Rubrics are versioned by row: editing a judge
-- adds version n+1 under the same name, so grades and cache keys always name what produced them.
CREATE TABLE judges (
    id            INTEGER PRIMARY KEY,
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    checkpoint_id INTEGER NOT NULL REFERENCES checkpoints(id),
    rubric        TEXT    NOT NULL,            -- contains {output}; may use {input}, {target}
    max_tokens    INTEGER NOT NULL,
    created_by    INTEGER REFERENCES users(id),
    created_at    INTEGER NOT NULL,
    CONSTRAINT judges_name_version_key UNIQUE (name, version)
);

-- Each eval's triage policy (JSON, engine/src/grading/triage.rs), versioned: launching freezes
-- the latest version into the manifest. A recalibration is a new version whose note and
-- calibration record say what changed and from which data.
CREATE TABLE grading_policies (
    id          INTEGER PRIMARY KEY,
    eval_id     INTEGER NOT NULL REFERENCES evals(id),
    version     INTEGER NOT NULL,
    policy_json TEXT    NOT NULL,
    note        TEXT    NOT NULL DEFAULT '',
    calibration_json TEXT,                     -- old and new thresholds, data used
    created_by  INTEGER REFERENCES users(id),
    created_at  INTEGER NOT NULL,
    CONSTRAINT grading_policies_eval_version_key UNIQUE (eval_id, version)
);

-- Every grade says which triage stage gave it, how sure it was and what it cost.
ALTER TABLE grades ADD COLUMN stage TEXT NOT NULL DEFAULT 'deterministic'
    CHECK (stage IN ('deterministic','cheap_judge','strong_judge','human'));
UPDATE grades SET stage = 'human' WHERE grader = 'human';
ALTER TABLE grades ADD COLUMN confidence REAL;        -- judges: probability of the verdict
ALTER TABLE grades ADD COLUMN agreement REAL;         -- judge ensembles: share voting the verdict
ALTER TABLE grades ADD COLUMN cost_usd REAL;          -- judge calls at the judge endpoint's prices
ALTER TABLE grades ADD COLUMN prompt_tokens INTEGER;
ALTER TABLE grades ADD COLUMN completion_tokens INTEGER;
ALTER TABLE grades ADD COLUMN latency_ms INTEGER;     -- including retries
ALTER TABLE grades ADD COLUMN model_used TEXT;
ALTER TABLE grades ADD COLUMN fallback_used BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE grades ADD COLUMN from_cache BOOLEAN NOT NULL DEFAULT FALSE;

-- A judge's page reads its grades (cost, calibration) without scanning every grade.
CREATE INDEX grades_judge_idx ON grades (grader) WHERE stage IN ('cheap_judge','strong_judge');

-- Which stage decided the identity's verdict: deterministic, cheap_judge, strong_judge or human;
-- pending while a human has to decide; error for an endpoint error (never graded). NULL until
-- the identity is answered.
ALTER TABLE work_items ADD COLUMN decided_by TEXT
    CHECK (decided_by IN ('deterministic','cheap_judge','strong_judge','human','pending','error'));
UPDATE work_items SET decided_by = CASE
    WHEN verdict = 'error' THEN 'error'
    WHEN verdict = 'uncertain' THEN 'pending'
    WHEN EXISTS (SELECT 1 FROM grades g WHERE g.work_item_id = work_items.id AND g.grader = 'human') THEN 'human'
    ELSE 'deterministic' END
WHERE verdict IS NOT NULL;

-- Why an item reached a human: triage escalated it, or it was drawn for the audit of
-- auto-accepted verdicts (whose verdict stands until a human says otherwise).
ALTER TABLE annotation_tasks ADD COLUMN kind TEXT NOT NULL DEFAULT 'escalation'
    CHECK (kind IN ('escalation','audit'));
-- The probability that triage sent an item like this one to a human (1 for escalations, the
-- audit rate for audits): calibration weights each label by its inverse, since audited
-- verdicts stand for many unlabelled ones.
ALTER TABLE annotation_tasks ADD COLUMN sampling_rate REAL NOT NULL DEFAULT 1
    CHECK (sampling_rate > 0 AND sampling_rate <= 1);

-- Judge calls by content: key = hash(judge fingerprint, rubric version, rendered judge prompt,
-- sampling settings, sample index). Re-grading the same answer with the same judge is free.
CREATE TABLE grade_cache (
    cache_key         TEXT    PRIMARY KEY,
    output            TEXT    NOT NULL,        -- the judge's reply (its rationale)
    verdict           TEXT    CHECK (verdict IN ('pass','fail')),  -- NULL: no verdict could be read
    confidence        REAL,
    prompt_tokens     INTEGER,
    completion_tokens INTEGER,
    model_used        TEXT,
    created_at        INTEGER NOT NULL
);
