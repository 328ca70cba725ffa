//! The store: everything Arbiter persists, behind one trait per area, with SQLite and
//! PostgreSQL backends.
//!
//! # Layout
//! Each area file holds its trait and, beside it, the one body of SQL both backends share (a
//! `macro_rules!` expanded once per backend by `backend_sql!`, so the two cannot drift
//! apart), with the records only the store and its callers use:
//! - [`accounts`]: users, teams, API tokens;
//! - [`catalog`]: datasets and their revisions, checkpoints and endpoints, evals;
//! - [`runs`]: runs, their result identities, progress and results;
//! - [`work_queue`]: claims, leases, heartbeats, recorded results, the generation cache;
//! - [`grading`]: judges, triage policies, the grade cache, calibration data, costs;
//! - [`annotation`]: the human queue (leases, labels, reviews, gold, raters, SLAs);
//! - [`open_queue`]: the open queue summed for its SLA figures;
//! - [`pay`]: pay pools, their rates, raters' pools and each rater's work per day;
//! - [`rubrics`]: rubrics raters answer and their guidelines, versioned;
//! - [`preferences`]: pairs of two runs' answers sent to raters, and their preferences;
//! - [`pushed`]: items pushed from outside into named labelling queues, read back with labels;
//! - [`label_events`]: items' human outcomes in the order decided (the `label.completed` webhook);
//! - [`reports`]: tallies, snapshots, exports, diffs, promotion decisions, trends;
//! - [`operations`]: settings, alerts, health figures, suites, webhooks, retention.
//!
//! [`Store`] is all of them together; callers hold an `Arc<dyn Store>`. The backend is chosen
//! by the database URL's scheme ([`Database::open`]). Placeholders are `$n` (both dialects
//! accept them); times are Unix milliseconds; counts use `COUNT(*) FILTER (...)`, which both
//! support. The dialect parameters are the statement that opens a write transaction (SQLite
//! takes the write lock up front with `BEGIN IMMEDIATE`, avoiding lock-upgrade failures) and
//! the row-lock clause for claims (`FOR UPDATE SKIP LOCKED` on PostgreSQL, nothing on
//! SQLite's single writer).
//!
//! The store knows no use case: it checks constraints and keeps invariants inside its
//! transactions; what a request may do is decided above it.

pub mod accounts;
pub mod annotation;
pub mod catalog;
pub mod grading;
pub mod label_events;
pub mod open_queue;
pub mod operations;
pub mod pay;
mod postgres;
pub mod preferences;
pub mod pushed;
pub mod reports;
pub mod rubrics;
pub mod runs;
pub mod serving;
mod sqlite;
pub mod work_queue;

pub use accounts::{AccountStore, UserCredentials, TOKEN_USE_RESOLUTION_MS};
pub use annotation::AnnotationStore;
pub use catalog::CatalogStore;
pub use grading::GradingStore;
pub use label_events::LabelEventStore;
pub use open_queue::{OpenQueueStore, SlotFilter};
pub use operations::{DeliveryAttempt, DueDelivery, OperationsStore, RawPurge};
pub use pay::{NewPayRate, PayStore};
pub use postgres::PostgresStore;
pub use preferences::PreferenceStore;
pub use pushed::PushedItemStore;
pub use reports::{ContaminationCounts, ExportRow, ReportStore, StoredSnapshot};
pub use rubrics::RubricStore;
pub use runs::{ManifestInputs, NewRun, RunStore};
pub use serving::{LauncherInfo, ManagedLaunch, ServingStore};
pub use sqlite::SqliteStore;
pub use work_queue::{
    ActiveRun, CacheHit, CachedGeneration, ClaimedIdentity, FinishedIdentity, IdentityContext,
    IdentityInputs, NewIdentity, RecordOutcome, WorkQueueStore,
};

use std::sync::Arc;

/// Errors a store reports. `Conflict` and `NotFound` are the caller's to explain; `Database` is
/// an infrastructure failure whose details are logged, never shown.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// A query failed; `operation` names the store method it failed in.
    #[error("database error in {operation}: {source}")]
    Database {
        operation: &'static str,
        #[source]
        source: sqlx::Error,
    },
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<sqlx::Error> for StoreError {
    /// Inside a store method; the method names itself on the way out ([`StoreError::during`]).
    fn from(source: sqlx::Error) -> StoreError {
        StoreError::Database {
            operation: "opening the database",
            source,
        }
    }
}

impl StoreError {
    /// Names the store method a database error happened in, for the log.
    pub(crate) fn during(self, operation: &'static str) -> StoreError {
        match self {
            StoreError::Database { source, .. } => StoreError::Database { operation, source },
            other => other,
        }
    }
}

/// Everything Arbiter persists: the areas together, as one object the engine passes around.
pub trait Store:
    AccountStore
    + CatalogStore
    + RunStore
    + WorkQueueStore
    + GradingStore
    + AnnotationStore
    + OpenQueueStore
    + PayStore
    + RubricStore
    + PreferenceStore
    + PushedItemStore
    + LabelEventStore
    + ReportStore
    + OperationsStore
    + ServingStore
    + Send
    + Sync
    + 'static
{
    /// `sqlite` or `postgres`, for logs and the health page.
    fn backend(&self) -> &'static str;
}

/// An opened database, keeping its concrete pool for the session store beside the `Store`.
#[derive(Clone)]
pub enum Database {
    Sqlite(Arc<SqliteStore>),
    Postgres(Arc<PostgresStore>),
}

impl Database {
    /// Opens (and migrates) the database named by a URL: `sqlite:` or `postgres(ql):`.
    pub async fn open(database_url: &str) -> StoreResult<Database> {
        if database_url.starts_with("sqlite:") {
            Ok(Database::Sqlite(Arc::new(
                SqliteStore::connect(database_url).await?,
            )))
        } else if database_url.starts_with("postgres:") || database_url.starts_with("postgresql:") {
            Ok(Database::Postgres(Arc::new(
                PostgresStore::connect(database_url).await?,
            )))
        } else {
            Err(StoreError::Conflict(format!(
                "unsupported database URL `{database_url}`: use sqlite://PATH or postgres://…"
            )))
        }
    }

    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Database::Sqlite(store) => store.clone(),
            Database::Postgres(store) => store.clone(),
        }
    }
}

/// A batch operation slower than this is logged with its size and time (sqlx's own
/// slow-statement log is off: it prints whole statements, 9,000 placeholders each).
const SLOW_OPERATION: std::time::Duration = std::time::Duration::from_secs(1);

/// Logs `operation` over `rows` rows since `started`: at debug level always, as a warning
/// when it took longer than [`SLOW_OPERATION`].
pub(crate) fn log_operation(operation: &'static str, rows: usize, started: std::time::Instant) {
    let took = started.elapsed();
    // Every batch at debug level (`RUST_LOG=arbiter_store=debug`): how long each claim,
    // commit and expansion chunk takes, which is how a worker's pace is diagnosed.
    tracing::debug!(
        operation,
        rows,
        us = took.as_micros() as u64,
        "store operation"
    );
    if took >= SLOW_OPERATION {
        tracing::warn!(
            operation,
            rows,
            ms = took.as_millis() as u64,
            "slow store operation"
        );
    }
}

/// Current time as Unix milliseconds, the unit of every stored timestamp.
pub fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// A stored priority rank as its class. Arbiter writes only the three ranks; a rank written
/// by hand outside them is read as the nearest class (as the SLA schedule's `>=` treats it),
/// so one odd row can never stop dispatch.
pub(crate) fn priority_of(rank: i64) -> Result<arbiter_domain::run::Priority, sqlx::Error> {
    use arbiter_domain::run::Priority;
    Ok(
        Priority::from_rank(rank.clamp(Priority::Ablation.rank(), Priority::Promotion.rank()))
            .unwrap_or_default(),
    )
}

/// A stored run status as its type.
pub(crate) fn status_of(text: &str) -> Result<arbiter_domain::run::RunStatus, sqlx::Error> {
    text.parse()
        .map_err(|err: String| sqlx::Error::Decode(err.into()))
}

/// Keys per `IN (…)` lookup. SQLite allows 32,766 bound variables per statement; each batch
/// constant keeps rows × columns well under that.
pub(crate) const KEY_LOOKUP_BATCH: usize = 1000;

/// Maps a unique-constraint violation to a user-facing conflict, by constraint name. SQLite
/// reports no constraint name, only the failing kind, so there any unique violation counts.
pub(crate) fn conflict_on(
    backend: &str,
    err: sqlx::Error,
    constraint: &str,
    message: &str,
) -> StoreError {
    if let sqlx::Error::Database(db_err) = &err {
        let by_name = db_err.constraint() == Some(constraint);
        let sqlite_unique =
            backend == "sqlite" && db_err.kind() == sqlx::error::ErrorKind::UniqueViolation;
        if by_name || sqlite_unique {
            return StoreError::Conflict(message.to_string());
        }
    }
    StoreError::from(err)
}

/// A value one column holds: what sqlx decodes as it is, and the domain's ids, stored as their
/// integers. (The domain knows no sqlx, so its ids cannot implement sqlx's traits themselves.)
pub(crate) trait Column<DB: sqlx::Database>: Sized {
    type Stored: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>;
    fn from_stored(stored: Self::Stored) -> Self;
}

macro_rules! stored_as_is {
    ($($plain:ty),+) => {$(
        impl<DB: sqlx::Database> Column<DB> for $plain
        where
            $plain: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
        {
            type Stored = $plain;
            fn from_stored(stored: $plain) -> $plain {
                stored
            }
        }
    )+};
}
stored_as_is!(i64, i32, f64, bool, String);

macro_rules! stored_as_integer {
    ($($id:ident),+) => {$(
        impl<DB: sqlx::Database> Column<DB> for arbiter_domain::ids::$id
        where
            i64: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
        {
            type Stored = i64;
            fn from_stored(stored: i64) -> Self {
                arbiter_domain::ids::$id(stored)
            }
        }
    )+};
}
stored_as_integer!(
    RunId,
    EvalId,
    CheckpointId,
    DatasetId,
    RevisionId,
    UserId,
    IdentityId,
    TaskId
);

impl<DB: sqlx::Database, T: Column<DB>> Column<DB> for Option<T>
where
    Option<T::Stored>: for<'r> sqlx::Decode<'r, DB> + sqlx::Type<DB>,
{
    type Stored = Option<T::Stored>;
    fn from_stored(stored: Option<T::Stored>) -> Option<T> {
        stored.map(T::from_stored)
    }
}

/// `row.read(name)` reads a column as any [`Column`] type: `try_get`, for ids too.
pub(crate) trait ReadColumn: sqlx::Row {
    fn read<T: Column<Self::Database>>(&self, name: &str) -> Result<T, sqlx::Error>
    where
        for<'a> &'a str: sqlx::ColumnIndex<Self>,
    {
        self.try_get::<T::Stored, _>(name).map(T::from_stored)
    }
}

impl<R: sqlx::Row> ReadColumn for R {}

/// Builds `$record` from `$row`, each listed field read from the column of the same name (so
/// each field is named once); fields after `;` are given as expressions (parsed values, nested
/// records, computed defaults).
macro_rules! read_columns {
    ($row:expr, $record:ident { $($field:ident),+ $(,)? $(; $($other:ident: $value:expr),+ $(,)?)? }) => {
        $record {
            $($field: {
                use $crate::ReadColumn as _;
                $row.read(stringify!($field))?
            },)+
            $($($other: $value,)+)?
        }
    };
}
pub(crate) use read_columns;

/// A dataset item's `fields` column: the JSON object of a structured item, `None` for a
/// four-field item.
pub(crate) fn structured_fields(
    column: Option<String>,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, sqlx::Error> {
    column
        .map(|text| serde_json::from_str(&text).map_err(|err| sqlx::Error::Decode(err.into())))
        .transpose()
}

/// A dataset item from a row with `case_id`, `input`, `target`, `category` and `fields`.
macro_rules! item_from_row {
    ($row:expr) => {
        $crate::read_columns!($row, DatasetItem {
            case_id,
            input,
            target,
            category,
            ;
            structured: $crate::structured_fields($row.read("fields")?)?,
        })
    };
}
pub(crate) use item_from_row;

/// Implements every area for one backend: each area's SQL in a module of its own (so each
/// keeps its own imports and helpers), sharing the backend's pools.
macro_rules! backend_sql {
    ($store:ident, $db:ty, $backend:literal, $begin:literal, $skip_locked:literal) => {
        impl $crate::Store for $store {
            fn backend(&self) -> &'static str {
                $backend
            }
        }
        mod accounts_sql {
            use super::$store;
            $crate::accounts::accounts_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod catalog_sql {
            use super::$store;
            $crate::catalog::catalog_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod runs_sql {
            use super::$store;
            $crate::runs::runs_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod work_queue_sql {
            use super::$store;
            $crate::work_queue::work_queue_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod grading_sql {
            use super::$store;
            $crate::grading::grading_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod annotation_sql {
            use super::$store;
            $crate::annotation::annotation_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod open_queue_sql {
            use super::$store;
            $crate::open_queue::open_queue_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod pay_sql {
            use super::$store;
            $crate::pay::pay_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod rubrics_sql {
            use super::$store;
            $crate::rubrics::rubrics_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod label_events_sql {
            use super::$store;
            $crate::label_events::label_events_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod preferences_sql {
            use super::$store;
            $crate::preferences::preferences_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod pushed_sql {
            use super::$store;
            $crate::pushed::pushed_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod reports_sql {
            use super::$store;
            $crate::reports::reports_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod operations_sql {
            use super::$store;
            $crate::operations::operations_sql!($store, $db, $backend, $begin, $skip_locked);
        }
        mod serving_sql {
            use super::$store;
            $crate::serving::serving_sql!($store, $db, $backend, $begin, $skip_locked);
        }
    };
}
pub(crate) use backend_sql;
