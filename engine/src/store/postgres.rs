//! The PostgreSQL backend: the shared store and work queue for many `serve` and `worker`
//! processes on many machines.

use sqlx::postgres::{PgPool, PgPoolOptions};

pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects to and migrates the database at a `postgres:` URL.
    pub async fn connect(url: &str) -> Result<PostgresStore, super::StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .connect(url)
            .await?;
        sqlx::migrate!("../migrations/postgres").run(&pool).await?;
        Ok(PostgresStore { pool })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

super::sql::sql_store!(
    PostgresStore,
    sqlx::Postgres,
    "postgres",
    "BEGIN",
    "FOR UPDATE SKIP LOCKED"
);
