//! Accounts: users and their roles, fair-share teams and their weights, personal API tokens
//! (only their SHA-256 is kept), and the leads' addresses for alert mail.

use arbiter_domain::accounts::{ApiToken, PasswordHash, Role, User};
use arbiter_domain::ids::UserId;
use async_trait::async_trait;

/// A user with their password hash, for login only.
pub struct UserCredentials {
    pub user: User,
    pub password_hash: PasswordHash,
}

/// Last-use times are written at most this often per token, so that a busy CI client does not
/// turn every read into a write.
pub const TOKEN_USE_RESOLUTION_MS: i64 = 60_000;

#[async_trait]
pub trait AccountStore: Send + Sync + 'static {
    async fn create_user(
        &self,
        username: &str,
        hash: &PasswordHash,
        role: Role,
    ) -> StoreResult<UserId>;

    async fn find_user_credentials(&self, username: &str) -> StoreResult<Option<UserCredentials>>;

    async fn get_user(&self, id: UserId) -> StoreResult<Option<User>>;

    /// Sets a user's password (an operator's reset), ends all their sessions and revokes their
    /// API tokens, in one transaction; `None` when there is no such user, else the tokens
    /// revoked.
    async fn reset_password(
        &self,
        username: &str,
        hash: &PasswordHash,
        now: i64,
    ) -> StoreResult<Option<u64>>;

    /// The user's own new password: clears `must_change_password` and moves the session epoch
    /// on (ending their other sessions); returns the new epoch, `None` for no such user.
    async fn change_password(
        &self,
        user_id: UserId,
        hash: &PasswordHash,
    ) -> StoreResult<Option<i64>>;

    async fn list_users(&self) -> StoreResult<Vec<User>>;

    /// Moves a user to a fair-share team; false when there is no such user.
    async fn set_team(&self, username: &str, team: &str) -> StoreResult<bool>;

    /// Sets a team's fair-share weight (created if new).
    async fn set_team_weight(&self, team: &str, weight: f64) -> StoreResult<()>;

    /// Email addresses of active leads (and admins).
    async fn lead_emails(&self) -> StoreResult<Vec<String>>;

    /// Stores a new token's hash; `NotFound` for an unknown user.
    async fn insert_api_token(
        &self,
        user_id: UserId,
        name: &str,
        token_hash: &str,
        prefix: &str,
        expires_at: Option<i64>,
        now: i64,
    ) -> StoreResult<ApiToken>;

    /// The owner of the live token with this hash, noting its use.
    async fn user_for_token(&self, token_hash: &str, now: i64) -> StoreResult<Option<User>>;

    /// Tokens of one user (`Some`) or of everyone (`None`), newest first.
    async fn api_tokens(&self, user_id: Option<UserId>) -> StoreResult<Vec<ApiToken>>;

    /// Revokes a live token (only `owner`'s when given); false when there was none to revoke.
    async fn revoke_api_token(
        &self,
        token_id: i64,
        owner: Option<UserId>,
        now: i64,
    ) -> StoreResult<bool>;
}

/// The SQL of [`AccountStore`], for both backends (expanded once per backend by `backend_sql!`).
macro_rules! accounts_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        use sqlx::Row;
        use $crate::ReadColumn as _;
        use arbiter_domain::ids::UserId;
        use arbiter_domain::accounts::{ApiToken, PasswordHash, Role, User};
        use $crate::{StoreResult, UserCredentials, now_ms};

        fn user_from_row(row: &<$db as sqlx::Database>::Row) -> Result<User, sqlx::Error> {
            let role: String = row.read("role")?;
            Ok(User {
                id: row.read("id")?,
                username: row.read("username")?,
                team: row.read("team")?,
                active: row.read("active")?,
                must_change_password: row.read("must_change_password")?,
                session_epoch: row.read("session_epoch")?,
                role: role
                    .parse::<Role>()
                    .map_err(|err| sqlx::Error::Decode(err.into()))?,
            })
        }

        const API_TOKEN_SELECT: &str = "SELECT t.id, t.user_id, u.username, t.name, t.prefix, \
            t.created_at, t.last_used_at, t.expires_at, t.revoked_at \
            FROM api_tokens t JOIN users u ON u.id = t.user_id";

        fn api_token_from_row(
            row: &<$db as sqlx::Database>::Row,
        ) -> Result<arbiter_domain::accounts::ApiToken, sqlx::Error> {
            Ok($crate::read_columns!(row, ApiToken {
                id,
                user_id,
                username,
                name,
                prefix,
                created_at,
                last_used_at,
                expires_at,
                revoked_at,
            }))
        }

        #[async_trait::async_trait]
        impl $crate::accounts::AccountStore for $store {
            async fn create_user(&self, username: &str, hash: &PasswordHash, role: Role) -> StoreResult<UserId> {
                let result: StoreResult<i64> = async move {
                    sqlx::query_scalar::<_, i64>(
                        "INSERT INTO users (username, password_hash, role, created_at) \
                         VALUES ($1, $2, $3, $4) RETURNING id",
                    )
                    .bind(username)
                    .bind(hash.as_phc())
                    .bind(role.as_str())
                    .bind(now_ms())
                    .fetch_one(&self.writer)
                    .await
                    .map_err(|err| {
                        $crate::conflict_on($backend, err, "users_username_key", &format!("the username `{username}` is taken"))
                    })
                }
                .await;
                result.map(UserId).map_err(|err| err.during("create_user"))
            }

            async fn find_user_credentials(&self, username: &str) -> StoreResult<Option<UserCredentials>> {
                let result: StoreResult<Option<UserCredentials>> = async move {
                    let row = sqlx::query("SELECT id, username, role, team, active, must_change_password, session_epoch, password_hash FROM users WHERE username = $1")
                        .bind(username)
                        .fetch_optional(&self.pool)
                        .await?;
                    let Some(row) = row else { return Ok(None) };
                    Ok(Some(UserCredentials {
                        user: user_from_row(&row)?,
                        password_hash: PasswordHash::from_stored(row.read("password_hash")?),
                    }))
                }
                .await;
                result.map_err(|err| err.during("find_user_credentials"))
            }

            async fn get_user(&self, id: UserId) -> StoreResult<Option<User>> {
                let result: StoreResult<Option<User>> = async move {
                    let row = sqlx::query("SELECT id, username, role, team, active, must_change_password, session_epoch FROM users WHERE id = $1")
                        .bind(id.get())
                        .fetch_optional(&self.pool)
                        .await?;
                    Ok(row.as_ref().map(user_from_row).transpose()?)
                }
                .await;
                result.map_err(|err| err.during("get_user"))
            }

            async fn reset_password(&self, username: &str, hash: &PasswordHash, now: i64) -> StoreResult<Option<u64>> {
                let result: StoreResult<Option<u64>> = async move {
                    let mut tx = self.writer.begin_with($begin).await?;
                    let id: Option<i64> = sqlx::query_scalar(
                        "UPDATE users SET password_hash = $1, session_epoch = session_epoch + 1, \
                         must_change_password = TRUE WHERE username = $2 RETURNING id",
                    )
                    .bind(hash.as_phc())
                    .bind(username)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(id) = id else { return Ok(None) };
                    let revoked = sqlx::query(
                        "UPDATE api_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL",
                    )
                    .bind(now)
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    tx.commit().await?;
                    Ok(Some(revoked))
                }
                .await;
                result.map_err(|err| err.during("reset_password"))
            }

            async fn change_password(&self, user_id: UserId, hash: &PasswordHash) -> StoreResult<Option<i64>> {
                let result: StoreResult<Option<i64>> = async move {
                    Ok(sqlx::query_scalar(
                        "UPDATE users SET password_hash = $1, session_epoch = session_epoch + 1, \
                         must_change_password = FALSE WHERE id = $2 RETURNING session_epoch",
                    )
                    .bind(hash.as_phc())
                    .bind(user_id.get())
                    .fetch_optional(&self.writer)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("change_password"))
            }

            async fn list_users(&self) -> StoreResult<Vec<User>> {
                let result: StoreResult<Vec<User>> = async move {
                    let rows = sqlx::query("SELECT id, username, role, team, active, must_change_password, session_epoch FROM users ORDER BY username")
                        .fetch_all(&self.pool)
                        .await?;
                    Ok(rows.iter().map(user_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("list_users"))
            }

            async fn set_team(&self, username: &str, team: &str) -> StoreResult<bool> {
                let result: StoreResult<bool> = async move {
                    let result = sqlx::query("UPDATE users SET team = $1 WHERE username = $2")
                        .bind(team)
                        .bind(username)
                        .execute(&self.writer)
                        .await?;
                    Ok(result.rows_affected() == 1)
                }
                .await;
                result.map_err(|err| err.during("set_team"))
            }

            async fn set_team_weight(&self, team: &str, weight: f64) -> StoreResult<()> {
                let result: StoreResult<()> = async move {
                    sqlx::query(
                        "INSERT INTO team_weights (team, weight) VALUES ($1, $2) \
                         ON CONFLICT (team) DO UPDATE SET weight = excluded.weight",
                    )
                    .bind(team)
                    .bind(weight)
                    .execute(&self.writer)
                    .await?;
                    Ok(())
                }
                .await;
                result.map_err(|err| err.during("set_team_weight"))
            }

            async fn lead_emails(&self) -> StoreResult<Vec<String>> {
                let result: StoreResult<Vec<String>> = async move {
                    Ok(sqlx::query_scalar(
                        "SELECT email FROM users WHERE active AND role IN ('lead', 'admin') \
                         AND email IS NOT NULL AND email <> '' ORDER BY id",
                    )
                    .fetch_all(&self.pool)
                    .await?)
                }
                .await;
                result.map_err(|err| err.during("lead_emails"))
            }

            async fn insert_api_token(
                &self,
                user_id: UserId,
                name: &str,
                token_hash: &str,
                prefix: &str,
                expires_at: Option<i64>,
                now: i64,
            ) -> $crate::StoreResult<arbiter_domain::accounts::ApiToken> {
                let result: $crate::StoreResult<arbiter_domain::accounts::ApiToken> = async move {
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO api_tokens (user_id, name, token_hash, prefix, created_at, expires_at) \
                         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                    )
                    .bind(user_id.get())
                    .bind(name)
                    .bind(token_hash)
                    .bind(prefix)
                    .bind(now)
                    .bind(expires_at)
                    .fetch_one(&self.writer)
                    .await
                    .map_err(|err| match err {
                        sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                            $crate::StoreError::NotFound(format!("no user with id {user_id}"))
                        }
                        other => other.into(),
                    })?;
                    let row = sqlx::query(&format!("{API_TOKEN_SELECT} WHERE t.id = $1"))
                        .bind(id)
                        .fetch_one(&self.writer)
                        .await?;
                    Ok(api_token_from_row(&row)?)
                }
                .await;
                result.map_err(|err| err.during("insert_api_token"))
            }

            async fn user_for_token(
                &self,
                token_hash: &str,
                now: i64,
            ) -> $crate::StoreResult<Option<arbiter_domain::accounts::User>> {
                let result: $crate::StoreResult<Option<arbiter_domain::accounts::User>> = async move {
                        let row = sqlx::query(
                        "SELECT t.id AS token_id, t.last_used_at, u.id, u.username, u.role, u.team, u.active, u.must_change_password, u.session_epoch \
                         FROM api_tokens t JOIN users u ON u.id = t.user_id \
                         WHERE t.token_hash = $1 AND t.revoked_at IS NULL \
                         AND (t.expires_at IS NULL OR t.expires_at > $2)",
                    )
                    .bind(token_hash)
                    .bind(now)
                    .fetch_optional(&self.pool)
                    .await?;
                    let Some(row) = row else { return Ok(None) };
                    let last_used: Option<i64> = row.read("last_used_at")?;
                    if last_used.is_none_or(|at| at + $crate::TOKEN_USE_RESOLUTION_MS <= now) {
                        sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                            .bind(now)
                            .bind(row.try_get::<i64, _>("token_id")?)
                            .execute(&self.writer)
                            .await?;
                    }
                    Ok(Some(user_from_row(&row)?))
                }
                .await;
                result.map_err(|err| err.during("user_for_token"))
            }

            async fn api_tokens(
                &self,
                user_id: Option<UserId>,
            ) -> $crate::StoreResult<Vec<arbiter_domain::accounts::ApiToken>> {
                let result: $crate::StoreResult<Vec<arbiter_domain::accounts::ApiToken>> = async move {
                    let rows = sqlx::query(&format!(
                        "{API_TOKEN_SELECT} WHERE ($1 IS NULL OR t.user_id = $1) ORDER BY t.id DESC"
                    ))
                    .bind(user_id.map(i64::from))
                    .fetch_all(&self.pool)
                    .await?;
                    Ok(rows.iter().map(api_token_from_row).collect::<Result<_, _>>()?)
                }
                .await;
                result.map_err(|err| err.during("api_tokens"))
            }

            async fn revoke_api_token(
                &self,
                token_id: i64,
                owner: Option<UserId>,
                now: i64,
            ) -> $crate::StoreResult<bool> {
                let result: $crate::StoreResult<bool> = async move {
                    let revoked = sqlx::query(
                        "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL \
                         AND ($3 IS NULL OR user_id = $3)",
                    )
                    .bind(now)
                    .bind(token_id)
                    .bind(owner.map(i64::from))
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                    Ok(revoked == 1)
                }
                .await;
                result.map_err(|err| err.during("revoke_api_token"))
            }
        }
    };
}

use crate::StoreResult;
pub(crate) use accounts_sql;
