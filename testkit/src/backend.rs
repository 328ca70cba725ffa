//! A fresh store per test on SQLite (a temporary directory) or PostgreSQL (a fresh database
//! on the throwaway server), and [`stories!`](crate::stories), which runs one story on both.
//!
//! PostgreSQL: `eval "$(scripts/start-postgres)"` exports `ARBITER_TEST_POSTGRES_URL`, a
//! superuser URL of a throwaway server. Without it the PostgreSQL tests fail; they never skip.

use arbiter_store::Database;
use sqlx::Connection;

// ---------------------------------------------------------------------------------------------
// Harness: one body per story, one test per (backend, story).
// ---------------------------------------------------------------------------------------------

/// Generates `mod sqlite { … }` and `mod postgres { … }`, each with one test per story that
/// opens a fresh store, runs the story against it and tears the store down.
#[macro_export]
macro_rules! stories {
    ($($story:ident),+ $(,)?) => {
        stories!(@backend sqlite; $($story),+);
        stories!(@backend postgres; $($story),+);
    };
    (@backend $backend:ident; $($story:ident),+) => {
        mod $backend {
            $(
                // Several worker threads, so the concurrency story really runs in parallel.
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $story() {
                    let backend = $crate::backend::TestBackend::$backend().await;
                    super::$story(backend.database.store()).await;
                    backend.tear_down().await;
                }
            )+
        }
    };
}

pub const POSTGRES_URL_VARIABLE: &str = "ARBITER_TEST_POSTGRES_URL";

/// An opened, migrated store and the scratch space it lives in.
pub struct TestBackend {
    pub database: Database,
    scratch: Scratch,
}

pub enum Scratch {
    /// Holds the SQLite file; removed when dropped.
    Directory(tempfile::TempDir),
    /// A database created for this test on the server at `admin_url`.
    PostgresDatabase { admin_url: String, name: String },
}

impl TestBackend {
    pub async fn sqlite() -> TestBackend {
        crate::egress::allow_loopback();
        let directory = tempfile::tempdir().expect("a temporary directory for the SQLite file");
        let url = format!("sqlite://{}", directory.path().join("arbiter.db").display());
        let database = Database::open(&url)
            .await
            .expect("the SQLite store opens and migrates");
        TestBackend {
            database,
            scratch: Scratch::Directory(directory),
        }
    }

    /// Creates `arbiter_test_<random>` so that tests run in parallel without sharing rows.
    pub async fn postgres() -> TestBackend {
        crate::egress::allow_loopback();
        let admin_url = std::env::var(POSTGRES_URL_VARIABLE)
            .ok()
            .filter(|url| !url.trim().is_empty())
            .unwrap_or_else(|| {
                panic!(
                    "{POSTGRES_URL_VARIABLE} is not set, so the PostgreSQL store cannot be tested: \
                     run `eval \"$(scripts/start-postgres)\"` in the repository root, then run the tests again"
                )
            });
        let name = format!("arbiter_test_{:016x}", rand::random::<u64>());
        let mut admin = admin_connection(&admin_url).await;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|err| panic!("cannot create the test database {name}: {err}"));
        let database = Database::open(&database_url(&admin_url, &name))
            .await
            .unwrap_or_else(|err| panic!("the PostgreSQL store {name} does not open: {err}"));
        TestBackend {
            database,
            scratch: Scratch::PostgresDatabase { admin_url, name },
        }
    }

    /// The database's URL (for tools such as `pg_dump`).
    pub fn url(&self) -> String {
        match &self.scratch {
            Scratch::Directory(directory) => {
                format!("sqlite://{}", directory.path().join("arbiter.db").display())
            }
            Scratch::PostgresDatabase { admin_url, name } => database_url(admin_url, name),
        }
    }

    /// Runs one SQL statement as it is, on either backend: for tests that stage a state no
    /// API call leaves behind (a launch that died part-way, a clock gone by).
    pub async fn execute(&self, sql: &str) {
        if let Err(err) = self.try_execute(sql).await {
            panic!("`{sql}` failed: {err}");
        }
    }

    /// Runs one SQL statement as it is and returns the rows it changed, or the database's
    /// error: for tests of what the schema itself refuses.
    pub async fn try_execute(&self, sql: &str) -> Result<u64, sqlx::Error> {
        match &self.database {
            Database::Sqlite(store) => sqlx::query(sql)
                .execute(store.pool())
                .await
                .map(|done| done.rows_affected()),
            Database::Postgres(store) => sqlx::query(sql)
                .execute(store.pool())
                .await
                .map(|done| done.rows_affected()),
        }
    }

    /// The one integer a query such as `SELECT COUNT(*) FROM …` returns, on either backend.
    pub async fn fetch_i64(&self, sql: &str) -> i64 {
        let value = match &self.database {
            Database::Sqlite(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await,
            Database::Postgres(store) => sqlx::query_scalar(sql).fetch_one(store.pool()).await,
        };
        value.unwrap_or_else(|err| panic!("`{sql}` failed: {err}"))
    }

    /// Closes the pool and removes the scratch space. A failed test never gets here, so its
    /// PostgreSQL database stays behind for inspection (the server is a throwaway one).
    pub async fn tear_down(self) {
        let TestBackend { database, scratch } = self;
        match &database {
            Database::Sqlite(store) => store.close().await,
            Database::Postgres(store) => store.close().await,
        }
        match scratch {
            Scratch::Directory(directory) => directory
                .close()
                .expect("the SQLite scratch directory is removed"),
            Scratch::PostgresDatabase { admin_url, name } => {
                let mut admin = admin_connection(&admin_url).await;
                sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await
                    .unwrap_or_else(|err| panic!("cannot drop the test database {name}: {err}"));
            }
        }
    }
}

pub async fn admin_connection(admin_url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(admin_url)
        .await
        .unwrap_or_else(|err| {
            panic!(
                "cannot connect to {admin_url} ({err}): is the test server running? \
             Run `eval \"$(scripts/start-postgres)\"` in the repository root"
            )
        })
}

/// The admin URL with its database name replaced, keeping any `?options`.
pub fn database_url(admin_url: &str, database: &str) -> String {
    let (address, options) = admin_url.split_once('?').unwrap_or((admin_url, ""));
    let authority_start = address.find("://").map_or(0, |index| index + 3);
    let path_start = address[authority_start..]
        .find('/')
        .map_or(address.len(), |index| authority_start + index);
    let mut url = format!("{}/{database}", &address[..path_start]);
    if !options.is_empty() {
        url.push('?');
        url.push_str(options);
    }
    url
}

// ---------------------------------------------------------------------------------------------
// Fixtures.
// ---------------------------------------------------------------------------------------------

pub fn sorted<Id: Ord>(mut ids: Vec<Id>) -> Vec<Id> {
    ids.sort_unstable();
    ids
}
