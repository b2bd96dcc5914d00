//! Fresh databases for tests: a temporary SQLite file or a PostgreSQL schema per test, so tests
//! run in parallel without seeing each other's records. Real databases, never mocks.
//!
//! PostgreSQL is the server at [`postgres_url`]. Schemas and databases made here are named
//! `idem_test_<unix seconds>_..`; [`discard`](TestStore::discard) drops them, and
//! whatever a failed or careless test left behind is dropped by the first helper call of a
//! later test process once it is an hour old. Temporary SQLite files get the same treatment.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_runtime::store::{Admin, BucketStore, MemoryStore, PostgresStore, SqliteStore, Store};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

/// The PostgreSQL database tests use unless `DATABASE_URL` names another.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Leftovers older than this are dropped by later test processes.
const STALE_AFTER: Duration = Duration::from_secs(3600);

/// Prefix of every schema, database and file the helpers create.
const PREFIX: &str = "idem_test_";

/// The PostgreSQL database for tests: `DATABASE_URL` when it is a `postgres://` or
/// `postgresql://` URL (it may name SQLite for the examples), else [`DEFAULT_POSTGRES_URL`].
pub fn postgres_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| url.starts_with("postgres://") || url.starts_with("postgresql://"))
        .unwrap_or_else(|| DEFAULT_POSTGRES_URL.to_owned())
}

/// A pool of up to 8 connections to [`postgres_url`].
///
/// # Panics
/// When the server cannot be reached, with a hint on how to start it.
pub async fn postgres_pool() -> PgPool {
    let pool = postgres_pool_at(&postgres_url()).await;
    sweep_postgres(&pool).await;
    pool
}

async fn postgres_pool_at(url: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(8)
        .connect(url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL is not reachable at {url} ({e}); start it with \
                 `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` \
                 or set DATABASE_URL"
            )
        })
}

/// A fresh, unused name: `idem_test_<unix seconds>_<pid>_<sequence>_<random>`, a valid unquoted
/// identifier.
pub fn unique_name() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!(
        "{PREFIX}{}_{}_{seq}_{:08x}",
        unix_secs(SystemTime::now()),
        std::process::id(),
        fastrand::u32(..)
    )
}

/// A [`PostgresStore`] in a fresh schema of the test database (see [`unique_name`]), on its own
/// pool of up to 8 connections. [`TestStore::discard`] drops the schema.
///
/// ```no_run
/// # async fn run() {
/// let store = idem_tests::postgres_store().await;
/// assert!(store.schema().starts_with("idem_test_"));
/// # }
/// ```
pub async fn postgres_store() -> PostgresStore {
    PostgresStore::builder(postgres_pool().await)
        .schema(unique_name())
        .build()
        .await
        .expect("migrating a fresh PostgreSQL schema")
}

/// Drops the store's schema, records and migrations table included, and closes its pool.
pub async fn drop_postgres_store(store: &PostgresStore) {
    let drop = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", store.schema());
    sqlx::raw_sql(AssertSqlSafe(drop))
        .execute(store.pool())
        .await
        .expect("dropping a test schema");
    store.pool().close().await;
}

/// A database of its own on the test server, for tests that need a whole database (the store's
/// default schema, say). Drop it with [`TestDatabase::drop`].
#[derive(Debug)]
pub struct TestDatabase {
    /// The database's name.
    pub name: String,
    /// A URL to connect to it.
    pub url: String,
}

impl TestDatabase {
    /// Creates an empty database named by [`unique_name`].
    pub async fn create() -> Self {
        let server = postgres_pool().await;
        let name = unique_name();
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&server)
            .await
            .expect("creating a test database");
        server.close().await;
        let base = postgres_url();
        let (base, query) = base.split_once('?').unwrap_or((&base, ""));
        let server_url = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        let url = format!("{server_url}/{name}{query}");
        Self { name, url }
    }

    /// A pool of up to 8 connections to the database.
    pub async fn pool(&self) -> PgPool {
        postgres_pool_at(&self.url).await
    }

    /// Drops the database, disconnecting whoever is still connected.
    pub async fn drop(self) {
        let server = postgres_pool().await;
        let drop = format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name);
        sqlx::raw_sql(AssertSqlSafe(drop))
            .execute(&server)
            .await
            .expect("dropping a test database");
        server.close().await;
    }
}

/// A path for a fresh SQLite database file in the temporary directory (not created).
pub fn sqlite_path() -> PathBuf {
    sweep_sqlite();
    std::env::temp_dir().join(format!("{}.db", unique_name()))
}

/// The `sqlite://` URL of `path`.
pub fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

/// A [`SqliteStore`] on a fresh temporary file, opened with [`SqliteStore::connect`] (WAL, busy
/// timeout, a pool of several connections). [`TestStore::discard`] deletes the file.
///
/// ```no_run
/// # async fn run() {
/// let store = idem_tests::sqlite_store().await;
/// # let _ = store;
/// # }
/// ```
pub async fn sqlite_store() -> SqliteStore {
    SqliteStore::connect(&sqlite_url(&sqlite_path()))
        .await
        .expect("opening a fresh SQLite file")
}

/// Closes the store's pool and deletes its database file and WAL files.
pub async fn remove_sqlite_store(store: &SqliteStore) {
    let path = store.pool().connect_options().get_filename().to_owned();
    store.pool().close().await;
    remove_sqlite_files(&path);
}

fn remove_sqlite_files(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

/// A store a test can make fresh and throw away: one per backend, so a generic test (the
/// conformance suite) runs against each with one line.
pub trait TestStore: Store + Admin + Clone {
    /// A new store that shares no records with any other.
    fn fresh() -> impl Future<Output = Self> + Send;

    /// Removes what [`fresh`](TestStore::fresh) created (schema, file).
    fn discard(self) -> impl Future<Output = ()> + Send;
}

impl TestStore for MemoryStore {
    async fn fresh() -> Self {
        MemoryStore::new()
    }

    async fn discard(self) {}
}

/// A [`BucketStore`] on a fresh `object_store::memory::InMemory`: conditional PUTs that are
/// truly atomic, as S3's are.
impl TestStore for BucketStore {
    async fn fresh() -> Self {
        let memory = std::sync::Arc::new(object_store::memory::InMemory::new());
        BucketStore::new(memory)
            .await
            .expect("InMemory supports conditional PUTs")
    }

    async fn discard(self) {}
}

impl TestStore for SqliteStore {
    async fn fresh() -> Self {
        sqlite_store().await
    }

    async fn discard(self) {
        remove_sqlite_store(&self).await;
    }
}

impl TestStore for PostgresStore {
    async fn fresh() -> Self {
        postgres_store().await
    }

    async fn discard(self) {
        drop_postgres_store(&self).await;
    }
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// The creation time a helper-made name carries, if `name` is one.
fn created_at(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.split('_').next()?.parse().ok()
}

pub(crate) fn is_stale(name: &str) -> bool {
    let cutoff = unix_secs(SystemTime::now()).saturating_sub(STALE_AFTER.as_secs());
    created_at(name).is_some_and(|secs| secs < cutoff)
}

/// Once per process: drops stale test schemas and databases. Best effort; another process may
/// be sweeping too.
async fn sweep_postgres(pool: &PgPool) {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::Relaxed) {
        return;
    }
    let pattern = format!("{}%", PREFIX.replace('_', "\\_"));
    let schemas: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1")
            .bind(&pattern)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    for schema in schemas.iter().filter(|s| is_stale(s)) {
        let drop = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
        let _ = sqlx::raw_sql(AssertSqlSafe(drop)).execute(pool).await;
    }
    let databases: Vec<String> =
        sqlx::query_scalar("SELECT datname::text FROM pg_database WHERE datname LIKE $1")
            .bind(&pattern)
            .fetch_all(pool)
            .await
            .unwrap_or_default();
    for database in databases.iter().filter(|d| is_stale(d)) {
        let drop = format!("DROP DATABASE IF EXISTS \"{database}\" WITH (FORCE)");
        let _ = sqlx::raw_sql(AssertSqlSafe(drop)).execute(pool).await;
    }
}

/// Once per process: deletes stale test SQLite files from the temporary directory.
fn sweep_sqlite() {
    static SWEPT: AtomicBool = AtomicBool::new(false);
    if SWEPT.swap(true, Ordering::Relaxed) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(db) = name.strip_suffix(".db")
            && is_stale(db)
        {
            remove_sqlite_files(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_their_creation_time() {
        let name = unique_name();
        assert!(created_at(&name).is_some(), "{name}");
        assert!(!is_stale(&name));
        assert!(is_stale("idem_test_1000_1_0_deadbeef"));
        assert!(!is_stale("payments"));
        assert!(!is_stale("idem"));
    }
}
