-- Personal API tokens for the REST API and the CLI. Only a SHA-256 of each token is kept: a
-- token is 238 random bits, so a fast hash is as safe as a slow one and lets every request be
-- checked with one indexed lookup. The prefix tells a user's tokens apart on the page.
CREATE TABLE api_tokens (
    id           BIGSERIAL PRIMARY KEY,
    user_id      BIGINT  NOT NULL REFERENCES users(id),
    name         TEXT    NOT NULL,
    token_hash   TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    created_at   BIGINT  NOT NULL,
    last_used_at BIGINT,
    expires_at   BIGINT,
    revoked_at   BIGINT
);
CREATE INDEX api_tokens_user_idx ON api_tokens (user_id);
