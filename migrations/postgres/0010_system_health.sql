-- System health over time: one row per monitor round, kept a week, for the health page's
-- charts and for rules about trends (a queue growing for over an hour).
CREATE TABLE health_samples (
    taken_at          BIGINT  PRIMARY KEY,
    queue_depth       BIGINT  NOT NULL,   -- identities of running runs not claimed yet
    claimed           BIGINT  NOT NULL,   -- identities leased to workers (in flight or next)
    answers_last_hour BIGINT  NOT NULL,
    errors_last_hour  BIGINT  NOT NULL,
    p99_latency_ms    BIGINT,             -- estimated from latency buckets; NULL without answers
    live_workers      BIGINT  NOT NULL
);

-- What each endpoint's own /metrics said last (vLLM's requests waiting and running), as the
-- workers' load control read it, for endpoint saturation on the health page.
CREATE TABLE endpoint_observations (
    url         TEXT    PRIMARY KEY,
    waiting     DOUBLE PRECISION NOT NULL,
    running     DOUBLE PRECISION NOT NULL,
    observed_at BIGINT  NOT NULL
);

-- Judge spending by day reads only judge grades (the ones with a cost).
CREATE INDEX grades_cost_time_idx ON grades (created_at) WHERE cost_usd IS NOT NULL;
