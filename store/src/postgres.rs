//! The PostgreSQL backend: the shared store and work queue for many `serve` and `worker`
//! processes on many machines.

use sqlx::postgres::{PgPool, PgPoolOptions};

pub struct PostgresStore {
    pool: PgPool,
    /// The same pool: PostgreSQL has no single-writer rule, so writes share the connections.
    writer: PgPool,
}

impl PostgresStore {
    /// Connects to and migrates the database at a `postgres:` URL.
    pub async fn connect(url: &str) -> Result<PostgresStore, crate::StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect(url)
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
