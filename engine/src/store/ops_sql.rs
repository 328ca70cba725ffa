//! The SQL of [`super::OpsStore`], for both backends (expanded next to `sql_store!`).

macro_rules! ops_sql {
    ($store:ident, $db:ty) => {
        const API_TOKEN_SELECT: &str = "SELECT t.id, t.user_id, u.username, t.name, t.prefix, \
            t.created_at, t.last_used_at, t.expires_at, t.revoked_at \
            FROM api_tokens t JOIN users u ON u.id = t.user_id";

        fn api_token_from_row(
            row: &<$db as sqlx::Database>::Row,
        ) -> Result<$crate::store::ApiToken, sqlx::Error> {
            use sqlx::Row;
            Ok($crate::store::ApiToken {
                id: row.try_get("id")?,
                user_id: row.try_get("user_id")?,
                username: row.try_get("username")?,
                name: row.try_get("name")?,
                prefix: row.try_get("prefix")?,
                created_at: row.try_get("created_at")?,
                last_used_at: row.try_get("last_used_at")?,
                expires_at: row.try_get("expires_at")?,
                revoked_at: row.try_get("revoked_at")?,
            })
        }

        #[async_trait::async_trait]
        impl $crate::store::OpsStore for $store {
            async fn insert_api_token(
                &self,
                user_id: i64,
                name: &str,
                token_hash: &str,
                prefix: &str,
                expires_at: Option<i64>,
                now: i64,
            ) -> $crate::store::StoreResult<$crate::store::ApiToken> {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO api_tokens (user_id, name, token_hash, prefix, created_at, expires_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                )
                .bind(user_id)
                .bind(name)
                .bind(token_hash)
                .bind(prefix)
                .bind(now)
                .bind(expires_at)
                .fetch_one(&self.writer)
                .await
                .map_err(|err| match err {
                    sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
                        $crate::store::StoreError::NotFound(format!("no user with id {user_id}"))
                    }
                    other => other.into(),
                })?;
                let row = sqlx::query(&format!("{API_TOKEN_SELECT} WHERE t.id = $1"))
                    .bind(id)
                    .fetch_one(&self.writer)
                    .await?;
                Ok(api_token_from_row(&row)?)
            }

            async fn user_for_token(
                &self,
                token_hash: &str,
                now: i64,
            ) -> $crate::store::StoreResult<Option<$crate::store::User>> {
                use sqlx::Row;
                let row = sqlx::query(
                    "SELECT t.id AS token_id, t.last_used_at, u.id, u.username, u.role, u.team, u.active \
                     FROM api_tokens t JOIN users u ON u.id = t.user_id \
                     WHERE t.token_hash = $1 AND t.revoked_at IS NULL \
                     AND (t.expires_at IS NULL OR t.expires_at > $2)",
                )
                .bind(token_hash)
                .bind(now)
                .fetch_optional(&self.pool)
                .await?;
                let Some(row) = row else { return Ok(None) };
                let last_used: Option<i64> = row.try_get("last_used_at")?;
                if last_used.is_none_or(|at| at + $crate::store::TOKEN_USE_RESOLUTION_MS <= now) {
                    sqlx::query("UPDATE api_tokens SET last_used_at = $1 WHERE id = $2")
                        .bind(now)
                        .bind(row.try_get::<i64, _>("token_id")?)
                        .execute(&self.writer)
                        .await?;
                }
                Ok(Some(user_from_row(&row)?))
            }

            async fn api_tokens(
                &self,
                user_id: Option<i64>,
            ) -> $crate::store::StoreResult<Vec<$crate::store::ApiToken>> {
                let rows = sqlx::query(&format!(
                    "{API_TOKEN_SELECT} WHERE ($1 IS NULL OR t.user_id = $1) ORDER BY t.id DESC"
                ))
                .bind(user_id)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.iter().map(api_token_from_row).collect::<Result<_, _>>()?)
            }

            async fn revoke_api_token(
                &self,
                token_id: i64,
                owner: Option<i64>,
                now: i64,
            ) -> $crate::store::StoreResult<bool> {
                let revoked = sqlx::query(
                    "UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL \
                     AND ($3 IS NULL OR user_id = $3)",
                )
                .bind(now)
                .bind(token_id)
                .bind(owner)
                .execute(&self.writer)
                .await?
                .rows_affected();
                Ok(revoked == 1)
            }
        }
    };
}

pub(super) use ops_sql;
