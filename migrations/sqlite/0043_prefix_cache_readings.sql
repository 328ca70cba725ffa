-- An endpoint's prefix cache as its /metrics last reported it: the share of prompt tokens found
-- cached since the server started, and how many it looked up (vLLM V1's counters; a server with
-- only V0's hit-rate gauge reports no count).
ALTER TABLE endpoint_observations ADD COLUMN prefix_cache_hit_rate REAL;
ALTER TABLE endpoint_observations ADD COLUMN prefix_cache_queries REAL;
