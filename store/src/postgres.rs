//! The PostgreSQL backend: the shared store and work queue for many `serve` and `worker`
//! processes on many machines.

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::ConnectOptions;
use std::str::FromStr;

pub struct PostgresStore {
    pool: PgPool,
    /// The same pool: PostgreSQL has no single-writer rule, so writes share the connections.
    writer: PgPool,
}

impl PostgresStore {
    /// Connects to and migrates the database at a `postgres:` URL.
    pub async fn connect(url: &str) -> Result<PostgresStore, crate::StoreError> {
        // Slow batches are logged as a summary by the store (`log_operation`), not statement by
        // statement by sqlx.
        let options = PgConnectOptions::from_str(url)?.disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect_with(options)
            .await?;
        sqlx::migrate!("../migrations/postgres").run(&pool).await?;
        Ok(PostgresStore {
            writer: pool.clone(),
            pool,
        })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
        self.writer.close().await;
    }
}

crate::backend_sql!(
    PostgresStore,
    sqlx::Postgres,
    "postgres",
    "BEGIN",
    "FOR UPDATE SKIP LOCKED"
);
