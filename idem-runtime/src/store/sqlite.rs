//! A store in a SQLite database: the embedded default, nothing to run beside the app.

use std::str::FromStr;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::core::clock::Timestamp;
use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::store::atomic::AtomicStore;
use crate::store::migrate::{self, Migration, failed};
use crate::store::sql::{fence, held_by};
use crate::store::{
    BoxFuture, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store,
};

/// Records in a SQLite database, in the table `idem_records`, on sqlx.
///
/// The table and its own migrations table (`idem_migrations`) are created on first use, so the
/// store can share a file with the application's data without touching its tables or its sqlx
/// migrations. Records survive restarts and are shared by every process that opens the file.
///
/// SQLite lets one writer in at a time; a claim is a single `INSERT .. ON CONFLICT DO UPDATE ..
/// RETURNING`, so concurrent claimers of one key are serialised by the database and exactly one
/// acquires it; a claim that finds a live record reads it with one more statement (a replay).
/// Writers waiting for the lock wait up to [`SqliteStore::BUSY_TIMEOUT`] instead of failing with
/// `SQLITE_BUSY`.
///
/// The store offers atomic mode ([`Tx<sqlx::Sqlite>`](crate::Tx)): a handler's writes and the
/// record's completion commit in one transaction on this database.
///
/// Operators can read the table (times are milliseconds since the Unix epoch):
///
/// ```sql
/// -- Which keys are stuck in flight, per endpoint (the owner's lease lapsed)?
/// SELECT operation, count(*) FROM idem_records
/// WHERE state = 'in_flight' AND lease_until < unixepoch('subsec') * 1000 GROUP BY operation;
/// -- How many completed in the last hour?
/// SELECT count(*) FROM idem_records
/// WHERE state = 'completed' AND completed_at >= (unixepoch('subsec') - 3600) * 1000;
/// ```
///
/// ```no_run
/// use idem_runtime::{Idempotency, store::SqliteStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // Creates `payments.db` if it is missing.
/// let store = SqliteStore::connect("sqlite://payments.db").await?;
/// let idempotency = Idempotency::builder().store(store).build()?;
/// # let _ = idempotency;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// How long a statement waits for another connection's write lock before failing.
    pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

    /// Opens (creating it if missing) the database at `url`, such as `sqlite://payments.db` or
    /// `sqlite::memory:`, and applies the store's migrations.
    ///
    /// Connections use WAL journaling (readers never block the writer), `synchronous = NORMAL`
    /// (durable across application crashes; a power loss may drop the last transactions) and a
    /// busy timeout of [`SqliteStore::BUSY_TIMEOUT`]. An in-memory database lives as long as the
    /// store and is private to it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idem_runtime::StoreError> {
    /// use idem_runtime::store::SqliteStore;
    ///
    /// let store = SqliteStore::connect("sqlite::memory:").await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(StoreError::unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Self::BUSY_TIMEOUT);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let pool = while_busy(|| {
            if in_memory {
                // An in-memory database disappears with its last connection: keep exactly one
                // open for the life of the pool (which also serialises access to it).
                SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
            } else {
                SqlitePoolOptions::new()
            }
            .connect_with(options.clone())
        })
        .await
        .map_err(StoreError::unavailable)?;
        Self::from_pool(pool).await
    }

    /// Uses an application's existing pool, applying the store's migrations to its database.
    ///
    /// Configure the pool as [`SqliteStore::connect`] does (WAL journaling and a busy timeout) so
    /// concurrent requests wait for the write lock rather than fail.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_runtime::store::SqliteStore;
    ///
    /// let pool = sqlx::SqlitePool::connect("sqlite://app.db").await?;
    /// let store = SqliteStore::from_pool(pool.clone()).await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        Ok(Self { pool })
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Reads the record that stopped a claim. `None` when there is nothing to report: the row
    /// changed between the claim's upsert and this read (released, or made claimable), so the
    /// claim must be tried again.
    async fn existing(&self, req: &ClaimRequest<'_>) -> Result<Option<Claim>, StoreError> {
        let row: Option<HeldRow> = sqlx::query_as(
            "SELECT fingerprint, state, lease_until, response FROM idem_records \
             WHERE key = ?1 AND expires_at > ?2 \
               AND NOT (state = 'in_flight' AND lease_until <= ?2 AND fingerprint = ?3)",
        )
        .bind(req.key.as_bytes().as_slice())
        .bind(req.now.as_millis())
        .bind(req.fingerprint.as_bytes().as_slice())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        row.map(|(fingerprint, state, lease_until, response)| {
            held_by(fingerprint, state, lease_until, response)
        })
        .transpose()
    }
}

/// A record that stopped a claim: fingerprint, state, lease_until, response.
type HeldRow = (Vec<u8>, String, i64, Option<Vec<u8>>);

/// How many times a claim is retried when the record changes between its upsert and the read
/// that reports it: each retry needs another writer to commit in that gap.
const CLAIM_ATTEMPTS: usize = 16;

impl Store for SqliteStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        for _ in 0..CLAIM_ATTEMPTS {
            // Inserts an absent record; replaces an expired one (a new life: one owner) or takes
            // over a lapsed lease of the same request (one more owner). A live record is left
            // alone and nothing is returned.
            let owners: Option<i64> = sqlx::query_scalar(
                "INSERT INTO idem_records (key, fingerprint, token, state, owners, lease_until, \
                    expires_at, operation, created_at) \
                 VALUES (?1, ?2, ?3, 'in_flight', 1, ?4, ?5, ?7, ?6) \
                 ON CONFLICT (key) DO UPDATE SET \
                    fingerprint = excluded.fingerprint, \
                    token = excluded.token, \
                    state = 'in_flight', \
                    owners = CASE WHEN idem_records.expires_at <= ?6 THEN 1 \
                                  ELSE idem_records.owners + 1 END, \
                    created_at = CASE WHEN idem_records.expires_at <= ?6 THEN ?6 \
                                      ELSE idem_records.created_at END, \
                    lease_until = excluded.lease_until, \
                    expires_at = excluded.expires_at, \
                    operation = excluded.operation, \
                    response = NULL, status = NULL, completed_at = NULL \
                 WHERE idem_records.expires_at <= ?6 \
                    OR (idem_records.state = 'in_flight' AND idem_records.lease_until <= ?6 \
                        AND idem_records.fingerprint = excluded.fingerprint) \
                 RETURNING owners",
            )
            .bind(req.key.as_bytes().as_slice())
            .bind(req.fingerprint.as_bytes().as_slice())
            .bind(req.token.as_i64())
            .bind(req.lease_until.as_millis())
            .bind(req.expires_at.as_millis())
            .bind(req.now.as_millis())
            .bind(req.operation)
            .fetch_optional(&self.pool)
            .await
            .map_err(StoreError::unavailable)?;
            if let Some(owners) = owners {
                return Ok(Claim::Acquired {
                    took_over: owners > 1,
                });
            }
            if let Some(claim) = self.existing(&req).await? {
                return Ok(claim);
            }
        }
        Err(StoreError::unavailable(std::io::Error::other(
            "the record kept changing under the claim",
        )))
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        complete_with(&self.pool, key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let done = sqlx::query(
            "DELETE FROM idem_records WHERE key = ?1 AND token = ?2 AND state = 'in_flight'",
        )
        .bind(key.as_bytes().as_slice())
        .bind(token.as_i64())
        .execute(&self.pool)
        .await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let done = sqlx::query(
            "UPDATE idem_records SET lease_until = ?3 \
             WHERE key = ?1 AND token = ?2 AND state = 'in_flight'",
        )
        .bind(key.as_bytes().as_slice())
        .bind(token.as_i64())
        .bind(lease_until.as_millis())
        .execute(&self.pool)
        .await;
        fence(done.map(|d| d.rows_affected()))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "DELETE FROM idem_records WHERE key IN \
                (SELECT key FROM idem_records WHERE expires_at <= ?1 \
                 ORDER BY expires_at LIMIT ?2)",
        )
        .bind(now.as_millis())
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        Ok(done.rows_affected())
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_atomic::<sqlx::Sqlite>(self.clone());
    }
}

impl AtomicStore<sqlx::Sqlite> for SqliteStore {
    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn complete_in<'a>(
        &'a self,
        conn: &'a mut sqlx::SqliteConnection,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(complete_with(conn, key, token, completion))
    }
}

/// The fenced completion, on the pool or inside a handler's transaction (atomic mode).
async fn complete_with<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Sqlite>,
    key: &RecordKey,
    token: LeaseToken,
    completion: Completion<'_>,
) -> Result<Fence, StoreError> {
    let done = sqlx::query(
        "UPDATE idem_records SET state = 'completed', response = ?3, expires_at = ?4, \
            status = ?5, completed_at = ?6 \
         WHERE key = ?1 AND token = ?2 AND state = 'in_flight'",
    )
    .bind(key.as_bytes().as_slice())
    .bind(token.as_i64())
    .bind(completion.payload)
    .bind(completion.expires_at.as_millis())
    .bind(completion.status.map(i64::from))
    .bind(completion.completed_at.as_millis())
    .execute(executor)
    .await;
    fence(done.map(|d| d.rows_affected()))
}

/// The schema, in order. Never edit a shipped migration: add the next one.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "create idem_records",
        // `owners` counts the requests that held the record since it was (re)created: more than
        // one means a lapsed lease was taken over. A rowid table, since responses can be large.
        sql: "CREATE TABLE idem_records (
            key         BLOB    NOT NULL PRIMARY KEY CHECK (length(key) = 32),
            fingerprint BLOB    NOT NULL CHECK (length(fingerprint) = 32),
            token       INTEGER NOT NULL,
            state       TEXT    NOT NULL CHECK (state IN ('in_flight', 'completed')),
            owners      INTEGER NOT NULL,
            lease_until INTEGER NOT NULL,
            expires_at  INTEGER NOT NULL,
            response    BLOB,
            CHECK ((state = 'completed') = (response IS NOT NULL))
        );
        CREATE INDEX idem_records_expires_at ON idem_records (expires_at);",
    },
    Migration {
        version: 2,
        description: "columns for operators: operation, status, created and completed times",
        // Records written before this migration keep replaying: their new columns take the
        // defaults (operation '', created_at 0).
        sql: "ALTER TABLE idem_records ADD COLUMN operation TEXT NOT NULL DEFAULT '';
        ALTER TABLE idem_records ADD COLUMN status INTEGER;
        ALTER TABLE idem_records ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE idem_records ADD COLUMN completed_at INTEGER;
        CREATE INDEX idem_records_in_flight ON idem_records (operation, lease_until)
            WHERE state = 'in_flight';",
    },
];

/// Runs `attempt` again while SQLite answers `SQLITE_BUSY` before its busy handler could wait
/// (as when several processes open one new file at once and race to switch it to WAL), with
/// backoff, for at most [`SqliteStore::BUSY_TIMEOUT`].
async fn while_busy<T, F>(mut attempt: impl FnMut() -> F) -> Result<T, sqlx::Error>
where
    F: std::future::Future<Output = Result<T, sqlx::Error>>,
{
    let deadline = std::time::Instant::now() + SqliteStore::BUSY_TIMEOUT;
    let mut backoff = Duration::from_millis(5);
    loop {
        match attempt().await {
            Err(error) if is_busy(&error) && std::time::Instant::now() < deadline => {
                tracing::debug!(
                    error = &error as &dyn std::error::Error,
                    "SQLite is busy; retrying"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

/// Whether SQLite answered `SQLITE_BUSY` (5), or one of its extended codes.
fn is_busy(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    error
        .code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}

/// Applies the missing [`MIGRATIONS`]. `BEGIN IMMEDIATE` takes the write lock up front, so
/// processes opening one file at once take turns (within the busy timeout).
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = while_busy(|| pool.begin_with("BEGIN IMMEDIATE"))
        .await
        .map_err(StoreError::unavailable)?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS idem_migrations (
            version     INTEGER NOT NULL PRIMARY KEY,
            description TEXT    NOT NULL,
            checksum    BLOB    NOT NULL,
            applied_at  TEXT    NOT NULL DEFAULT CURRENT_TIMESTAMP
        )",
    )
    .execute(&mut *tx)
    .await
    .map_err(StoreError::unavailable)?;
    let applied: Vec<(i64, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM idem_migrations")
            .fetch_all(&mut *tx)
            .await
            .map_err(StoreError::unavailable)?;
    for migration in migrate::plan(MIGRATIONS, &applied)? {
        let version = migration.version;
        sqlx::raw_sql(migration.sql)
            .execute(&mut *tx)
            .await
            .map_err(failed(version))?;
        sqlx::query(
            "INSERT INTO idem_migrations (version, description, checksum) VALUES (?, ?, ?)",
        )
        .bind(version)
        .bind(migration.description)
        .bind(migration.checksum())
        .execute(&mut *tx)
        .await
        .map_err(failed(version))?;
        tracing::info!(
            version,
            migration.description,
            "applied idempotency store migration"
        );
    }
    tx.commit().await.map_err(StoreError::unavailable)
}
