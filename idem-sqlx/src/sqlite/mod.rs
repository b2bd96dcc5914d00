//! A store in a SQLite database: the embedded default, nothing to run beside the app.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::SqlitePool;

use crate::atomic::AtomicStore;
use crate::sql::{RecordStatements, fence, held_by};
use idem_core::clock::Timestamp;
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::{
    BoxFuture, Capabilities, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store,
};

mod builder;
mod checkpoint;
mod records;
mod schema;
#[cfg(test)]
mod tests;
mod writer;

pub use builder::SqliteStoreBuilder;
use schema::{migrate, while_busy};
use writer::{Turn, Writer};

/// The operators' statements over `idem_records`, rendered once per process.
static RECORDS: LazyLock<RecordStatements> =
    LazyLock::new(|| RecordStatements::new("idem_records", ""));

/// Records in a SQLite database, in the table `idem_records`, on sqlx.
///
/// The table and its own migrations table (`idem_migrations`) are created on first use, so the
/// store can share a file with the application's data without touching its tables or its sqlx
/// migrations. Records survive restarts and are shared by every process that opens the file.
///
/// SQLite lets one connection write at a time. The engine's writes (claims, completions,
/// releases, lease renewals and the sweep) go through one connection of the store's own, the
/// writer, which they take in turn within the process: they do not contend for SQLite's lock,
/// and the writer keeps its page cache, which no other connection's commit invalidates. A claim
/// first reads the key on the pool: a live record (a replay, a reused key, a key in flight)
/// answers from that read, without waiting for the writer. Otherwise the claim is a single
/// `INSERT .. ON CONFLICT DO UPDATE .. RETURNING` on the writer, so concurrent claimers of one
/// key are serialised and exactly one acquires it. Statements that still meet another
/// connection's lock (another process's, a handler's transaction in atomic mode) wait up to
/// [`SqliteStore::BUSY_TIMEOUT`] instead of failing with `SQLITE_BUSY`. When the writer's
/// connection fails, that write returns the error and the next opens a new connection. A
/// store on an in-memory database, which only the pool's one connection sees, writes through
/// its pool.
///
/// The writer does not stop to checkpoint (to copy the write-ahead log into the database file
/// and sync it), which SQLite otherwise does in the commit that takes the log past 1 000
/// pages. A task of the store's, on a connection of its own opened when first needed, copies
/// each moment's commits in the background in `PASSIVE` mode, which blocks neither readers nor
/// the writer. A copy made while writes keep coming is rarely complete, and only a complete
/// one lets the log start over, so past 8 192 pages (32 MiB) the writer finishes the copy
/// itself and the log starts again; its file is cut back to 64 MiB should a long reader have
/// let it grow beyond. The task ends with the store (its last clone dropped) or its runtime;
/// without it, the writer's own checkpoints still bound the log.
///
/// The store offers atomic mode (`Tx<sqlx::Sqlite>`): a handler's writes and the
/// record's completion commit in one transaction on this database.
///
/// Beside what the engine needs, each row keeps for operators `operation`, `scope`,
/// `scope_value`, `state` (`in_flight` or `completed`), `status`, `created_at`, `completed_at`,
/// `lease_until` and `expires_at`; a record written before a column existed shows it empty
/// (`''`, 0 or NULL). The operator methods ([`Admin::list_records`](idem_core::store::Admin::list_records) and the rest) read and
/// change these rows, selecting them in SQL exactly as [`RecordFilter::matches`](idem_core::store::records::RecordFilter::matches) does. Listing,
/// counting and purging read the table (no index serves them, so claims pay for none): on
/// millions of records they take seconds.
///
/// # Connections, page cache and memory-mapped I/O
///
/// Beside its writer, the store's pool holds up to [`SqliteStore::DEFAULT_MAX_CONNECTIONS`]
/// connections, for the claims' reads, handlers' transactions in atomic mode (each holds one
/// while it runs) and the operators' methods. Every connection has SQLite's own page cache of
/// about 2 MB ([`SqliteStore::DEFAULT_CACHE_SIZE_KIB`]) and no memory-mapped I/O
/// ([`SqliteStore::DEFAULT_MMAP_SIZE`]); [`SqliteStore::builder`] changes each. In WAL mode a
/// connection discards its whole page cache when it begins a transaction after another
/// connection committed, so while keys are being claimed a pooled connection's cache, whatever
/// its size, holds little; and SQLite serves pages from the mapping only to statements that do
/// not write. Larger caches and mappings were measured with every write on the pool and bought
/// nothing beside a million records. With the writer, a 64 MiB cache served about 16 % fewer
/// fresh keys a second than the default there, and a 1 GiB mapping none more: at the end of a
/// write transaction in which a B-tree balance renumbered a page (it does so through the
/// number of the page holding byte 1 GiB), SQLite walks the writer's whole cache, so a larger
/// cache makes those commits dearer. `BENCHMARKS.md` and `bench/HISTORY.md` in the repository
/// have the measurements.
///
/// Operators can also query the table themselves (times are milliseconds since the Unix
/// epoch):
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
/// use idem_sqlx::SqliteStore;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// // Creates `payments.db` if it is missing.
/// let store = SqliteStore::connect("sqlite://payments.db").await?;
/// // Then `Idempotency::builder().store(store).build()?`, with `idem-runtime`.
/// # let _ = store;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The connection for the engine's writes; `None` writes through the pool.
    writer: Option<Arc<Writer>>,
}

impl SqliteStore {
    /// How long a statement waits for another connection's write lock before failing.
    pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

    /// Each connection's page cache unless [`SqliteStoreBuilder::cache_size_kib`] says
    /// otherwise, in KiB: SQLite's own default (`PRAGMA cache_size = -2000`). Caches of 16 and
    /// 64 MiB were measured and saved no reads with the default pool; 64 MiB cost CPU, for the
    /// reason [`SqliteStore`] gives.
    pub const DEFAULT_CACHE_SIZE_KIB: u32 = 2000;

    /// Each connection's memory-mapped I/O unless [`SqliteStoreBuilder::mmap_size`] says
    /// otherwise, in bytes: none, SQLite's own default. 256 MiB and 1 GiB were measured and
    /// saved no reads, and 1 GiB with the writer was no faster (see [`SqliteStore`]).
    pub const DEFAULT_MMAP_SIZE: u64 = 0;

    /// The most connections the store's pool opens unless
    /// [`SqliteStoreBuilder::max_connections`] says otherwise: sqlx's default. An in-memory
    /// database always has exactly one.
    pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

    /// Opens (creating it if missing) the database at `url`, such as `sqlite://payments.db` or
    /// `sqlite::memory:`, and applies the store's migrations: [`SqliteStore::builder`] with
    /// its defaults.
    ///
    /// Connections use WAL journaling (readers never block the writer), `synchronous = NORMAL`
    /// (durable across application crashes; a power loss may drop the last transactions), a
    /// busy timeout of [`SqliteStore::BUSY_TIMEOUT`], and the page cache and memory-mapped I/O
    /// of [`SqliteStoreBuilder`]'s defaults. An in-memory database lives as long as the store
    /// and is private to it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), idem_core::error::StoreError> {
    /// use idem_sqlx::SqliteStore;
    ///
    /// let store = SqliteStore::connect("sqlite::memory:").await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::builder(url).build().await
    }

    /// Configures a store on the database at `url` (as [`connect`](Self::connect) takes it):
    /// the size of its pool, and of each connection's page cache and memory-mapped I/O (see
    /// [`SqliteStore`] for what they do).
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), idem_core::error::StoreError> {
    /// use idem_sqlx::SqliteStore;
    ///
    /// let store = SqliteStore::builder("sqlite://payments.db")
    ///     .max_connections(4)
    ///     .cache_size_kib(8 * 1024) // 8 MiB per connection, 32 MiB in all
    ///     .mmap_size(0) // no memory-mapped I/O (the default)
    ///     .build()
    ///     .await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: impl Into<String>) -> SqliteStoreBuilder {
        SqliteStoreBuilder::new(url.into())
    }

    /// Uses an application's existing pool, applying the store's migrations to its database.
    /// Beside the pool, the store opens its writer, one connection with the pool's connect
    /// options; on an in-memory database, which no other connection would see, it writes
    /// through the pool.
    ///
    /// Configure the pool as [`SqliteStore::connect`] does (WAL journaling and a busy timeout) so
    /// concurrent requests wait for the write lock rather than fail. Its page cache and
    /// memory-mapped I/O are the pool's own: set them on its connect options, as pragmas, to
    /// match the store's (see [`SqliteStore`]); sqlx applies them to every connection it opens.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use idem_sqlx::SqliteStore;
    /// use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    ///
    /// let options = "sqlite://app.db"
    ///     .parse::<SqliteConnectOptions>()?
    ///     .create_if_missing(true)
    ///     .journal_mode(SqliteJournalMode::Wal)
    ///     .busy_timeout(SqliteStore::BUSY_TIMEOUT)
    ///     .pragma("cache_size", "-2000") // KiB, negative; SqliteStore::DEFAULT_CACHE_SIZE_KIB
    ///     .pragma("mmap_size", "0"); // bytes; SqliteStore::DEFAULT_MMAP_SIZE
    /// let pool = SqlitePoolOptions::new()
    ///     .max_connections(SqliteStore::DEFAULT_MAX_CONNECTIONS)
    ///     .connect_with(options)
    ///     .await?;
    /// let store = SqliteStore::from_pool(pool.clone()).await?;
    /// # let _ = store;
    /// # Ok(()) }
    /// ```
    pub async fn from_pool(pool: SqlitePool) -> Result<Self, StoreError> {
        migrate(&pool).await?;
        let writer = while_busy(|| Writer::for_pool(&pool))
            .await
            .map_err(StoreError::unavailable)?;
        Ok(Self {
            pool,
            writer: writer.map(Arc::new),
        })
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
            "SELECT fingerprint, state, lease_until, response, completed_at FROM idem_records \
             WHERE key = ?1 AND expires_at > ?2 \
               AND NOT (state = 'in_flight' AND lease_until <= ?2 AND fingerprint = ?3)",
        )
        .bind(req.key.as_bytes().as_slice())
        .bind(req.now.as_millis())
        .bind(req.fingerprint.as_bytes().as_slice())
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::unavailable)?;
        row.map(
            |(fingerprint, state, lease_until, response, completed_at)| {
                held_by(fingerprint, &state, lease_until, response, completed_at)
            },
        )
        .transpose()
    }

    /// A connection for one of the engine's writes: the writer's, once the writes before have
    /// had theirs. A store whose pool was closed is closed: its writer too.
    async fn turn(&self) -> Result<Turn<'_>, StoreError> {
        match &self.writer {
            Some(writer) => writer.turn(self.pool.is_closed()).await,
            None => self.pool.acquire().await.map(Turn::Pool),
        }
        .map_err(StoreError::unavailable)
    }
}

/// A record that stopped a claim: fingerprint, state, lease_until, response, completed_at.
type HeldRow = (Vec<u8>, String, i64, Option<Vec<u8>>, Option<i64>);

/// How many times a claim is retried when the record changes between its upsert and the read
/// that reports it: each retry needs another writer to commit in that gap.
const CLAIM_ATTEMPTS: usize = 16;

impl Store for SqliteStore {
    async fn claim(&self, req: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        // A live record answers from a read on the pool, without waiting for the writer: replays,
        // reused keys and keys in flight. What the read finds claimable is claimed below.
        if let Some(claim) = self.existing(&req).await? {
            return Ok(claim);
        }
        for _ in 0..CLAIM_ATTEMPTS {
            // Inserts an absent record; replaces an expired one (a new life: one owner) or takes
            // over a lapsed lease of the same request (one more owner), which keeps what the
            // record says about itself (its operation, scope and creation time). A live record
            // is left alone and nothing is returned.
            let mut turn = self.turn().await?;
            let owners: Result<Option<i64>, _> = sqlx::query_scalar(
                "INSERT INTO idem_records (key, fingerprint, token, state, owners, lease_until, \
                    expires_at, operation, created_at, scope, scope_value) \
                 VALUES (?1, ?2, ?3, 'in_flight', 1, ?4, ?5, ?7, ?6, ?8, ?9) \
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
                    operation = CASE WHEN idem_records.expires_at <= ?6 THEN excluded.operation \
                                     ELSE idem_records.operation END, \
                    scope = CASE WHEN idem_records.expires_at <= ?6 THEN excluded.scope \
                                 ELSE idem_records.scope END, \
                    scope_value = CASE WHEN idem_records.expires_at <= ?6 \
                                       THEN excluded.scope_value \
                                       ELSE idem_records.scope_value END, \
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
            .bind(req.scope)
            .bind(req.scope_value)
            .fetch_optional(turn.conn())
            .await;
            let owners = turn.checked(owners).map_err(StoreError::unavailable)?;
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
        let mut turn = self.turn().await?;
        let done = complete_with(turn.conn(), key, token, completion).await;
        fence(turn.checked(done))
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        let mut turn = self.turn().await?;
        let done = sqlx::query(
            "DELETE FROM idem_records WHERE key = ?1 AND token = ?2 AND state = 'in_flight'",
        )
        .bind(key.as_bytes().as_slice())
        .bind(token.as_i64())
        .execute(turn.conn())
        .await;
        fence(turn.checked(done).map(|d| d.rows_affected()))
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        let mut turn = self.turn().await?;
        let done = sqlx::query(
            "UPDATE idem_records SET lease_until = ?3 \
             WHERE key = ?1 AND token = ?2 AND state = 'in_flight'",
        )
        .bind(key.as_bytes().as_slice())
        .bind(token.as_i64())
        .bind(lease_until.as_millis())
        .execute(turn.conn())
        .await;
        fence(turn.checked(done).map(|d| d.rows_affected()))
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let mut turn = self.turn().await?;
        let done = sqlx::query(
            "DELETE FROM idem_records WHERE key IN \
                (SELECT key FROM idem_records WHERE expires_at <= ?1 \
                 ORDER BY expires_at LIMIT ?2)",
        )
        .bind(now.as_millis())
        .bind(i64::from(limit))
        .execute(turn.conn())
        .await;
        let done = turn.checked(done).map_err(StoreError::unavailable)?;
        Ok(done.rows_affected())
    }

    fn offer_capabilities(self: &std::sync::Arc<Self>, capabilities: &mut Capabilities) {
        capabilities.offer_admin(self.clone());
        crate::atomic::offer::<sqlx::Sqlite>(capabilities, self.clone());
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
        Box::pin(async move { fence(complete_with(conn, key, token, completion).await) })
    }
}

/// The fenced completion, on the writer or inside a handler's transaction (atomic mode): how
/// many rows it completed.
async fn complete_with<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Sqlite>,
    key: &RecordKey,
    token: LeaseToken,
    completion: Completion<'_>,
) -> Result<u64, sqlx::Error> {
    sqlx::query(
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
    .await
    .map(|done| done.rows_affected())
}
