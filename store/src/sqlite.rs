//! The embedded SQLite backend: one file in WAL mode, in-process workers.

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::ConnectOptions;
use std::str::FromStr;
use std::time::Duration;

pub struct SqliteStore {
    /// Reads (and the session store).
    pool: SqlitePool,
    /// Every write goes through this one connection. SQLite has one writer at a time anyway;
    /// one connection keeps the write path's page cache warm (a connection's cache is dropped
    /// whenever another connection has written) and writers never wait on busy retries.
    writer: SqlitePool,
}

/// Applies pending migrations on a connection of its own with foreign keys off. Changing a
/// table's constraints in SQLite means rebuilding it (migration 0019 rebuilds `work_items`),
/// and with foreign keys on, dropping or renaming the old table would check or rewrite every
/// reference into it; sqlx runs each migration in a transaction, inside which the setting
/// cannot change. A migration that rebuilds a table checks the references into it itself.
async fn migrate(options: &SqliteConnectOptions) -> Result<(), crate::StoreError> {
    use sqlx::Connection;
    let mut connection = options.clone().foreign_keys(false).connect().await?;
    sqlx::migrate!("../migrations/sqlite")
        .run(&mut connection)
        .await?;
    connection.close().await?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if missing) and migrates the database at a `sqlite:` URL.
    pub async fn connect(url: &str) -> Result<SqliteStore, crate::StoreError> {
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
            // Checkpoint the WAL every 16 MB rather than every 4 MB: the hot pages of the work
            // queue's indexes are rewritten many times between checkpoints, and each
            // checkpoint copies them to the database file once. Much larger checkpoints stall
            // the writer long enough to idle the endpoint (`arbiter bench long-tail`).
            .pragma("wal_autocheckpoint", "4000")
            .foreign_keys(true)
            // Writers queue behind each other instead of failing: SQLite has one writer at a time.
            .busy_timeout(Duration::from_secs(30))
            // Slow batches are logged as a summary by the store (`log_operation`), not statement
            // by statement by sqlx.
            .disable_statement_logging();
        // The writer's cache holds the work queue's hot pages (claim index, newest results):
        // 32 MB, once, rather than per reader.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone().pragma("cache_size", "-32000"))
            .await?;
        migrate(&options).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // Connections are cheap to keep and costly to reopen (page cache, memory map).
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options)
            .await?;
        Ok(SqliteStore { pool, writer })
    }

    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Writes a consistent copy of the whole database to `path` (SQLite's `VACUUM INTO`),
    /// while the store stays in use: an online backup that needs no `sqlite3` tool. `path`
    /// must not exist yet.
    pub async fn backup_into(&self, path: &std::path::Path) -> Result<(), crate::StoreError> {
        if path.exists() {
            return Err(crate::StoreError::Conflict(format!(
                "{} exists already; back up to a new file",
                path.display()
            )));
        }
        sqlx::query("VACUUM INTO $1")
            .bind(path.display().to_string())
            .execute(&self.pool)
            .await
            .map_err(|err| crate::StoreError::from(err).during("backup_into"))?;
        Ok(())
    }

    /// Closes every connection.
    pub async fn close(&self) {
        self.pool.close().await;
        self.writer.close().await;
    }
}

crate::backend_sql!(SqliteStore, sqlx::Sqlite, "sqlite", "BEGIN IMMEDIATE", "");
