//! The embedded SQLite backend: one file in WAL mode, in-process workers.

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
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
            // In WAL mode NORMAL never corrupts the database and loses nothing on a process
            // crash; only an OS crash can drop the last commits. FULL would sync every commit.
            .synchronous(SqliteSynchronous::Normal)
            // A larger page cache per connection (8 MB; 2 MB is SQLite's default): the work
            // queue's pages are read far more often than written. Bounded because it is
            // per connection and the server must stay small on million-item runs.
            .pragma("cache_size", "-8000")
            .pragma("temp_store", "memory")
            .foreign_keys(true)
            // Writers queue behind each other instead of failing: SQLite has one writer at a time.
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // Connections are cheap to keep and costly to reopen (page cache, memory map).
            .idle_timeout(None)
            .max_lifetime(None)
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
