//! The embedded SQLite backend: one file in WAL mode, in-process workers.

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use std::str::FromStr;
use std::time::Duration;

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) and migrates the database at a `sqlite:` URL.
    pub async fn connect(url: &str) -> Result<SqliteStore, super::StoreError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            // Writers queue behind each other instead of failing: SQLite has one writer at a time.
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
        Ok(SqliteStore { pool })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

super::sql::sql_store!(SqliteStore, sqlx::Sqlite, "sqlite", "BEGIN IMMEDIATE", "");
