//! The SQLite store's builder: the pool's size and each connection's page cache and
//! memory-mapped I/O, checked before the database is opened.

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::SqliteStore;
use super::schema::while_busy;
use idem_core::error::StoreError;

/// Configures a [`SqliteStore`]; made by [`SqliteStore::builder`].
///
/// The page cache and the memory-mapped I/O are per connection: sqlx applies them as pragmas
/// (`cache_size`, `mmap_size`) to every connection it opens, the writer's, the checkpointer's
/// and the pool's, so the store may hold up to [`max_connections`](Self::max_connections) + 2
/// times each.
#[derive(Debug, Clone)]
#[must_use = "call `.build().await` to open the store"]
pub struct SqliteStoreBuilder {
    url: String,
    cache_size_kib: u32,
    mmap_size: u64,
    max_connections: u32,
}

impl SqliteStoreBuilder {
    /// A builder for the database at `url`, with the store's defaults.
    pub(super) fn new(url: String) -> Self {
        Self {
            url,
            cache_size_kib: SqliteStore::DEFAULT_CACHE_SIZE_KIB,
            mmap_size: SqliteStore::DEFAULT_MMAP_SIZE,
            max_connections: SqliteStore::DEFAULT_MAX_CONNECTIONS,
        }
    }

    /// The most memory-mapped I/O the builder accepts: SQLite reads the pragma's value as a
    /// signed 64-bit number.
    const MAX_MMAP_SIZE: u64 = i64::MAX as u64;

    /// Each connection's page cache, in KiB (1024 bytes; `PRAGMA cache_size = -N`); default
    /// [`SqliteStore::DEFAULT_CACHE_SIZE_KIB`], about 2 MB. SQLite takes the memory as it reads
    /// pages, up to this size, and keeps a few pages whatever the setting; a write transaction
    /// that changes nine tenths as many pages as the cache holds makes SQLite add pages rather
    /// than reuse them, and the cache keeps them (the writer's grew to three times its size
    /// with the sweep's deletes, `bench/HISTORY.md` in the repository). A larger cache is not
    /// faster: SQLite walks the whole of it at the end of some write transactions (see
    /// [`SqliteStore`]). At least 1: SQLite reads 0 as "unset" and puts its default back when
    /// it reloads the schema.
    pub fn cache_size_kib(mut self, kib: u32) -> Self {
        self.cache_size_kib = kib;
        self
    }

    /// How much of the database file each connection reads through memory-mapped I/O, in bytes
    /// (`PRAGMA mmap_size`); 0, the default ([`SqliteStore::DEFAULT_MMAP_SIZE`]), reads it
    /// with system calls only. Mapped pages are the kernel's page cache seen in the process's
    /// address space, not memory of the store's own, though they count in its resident size.
    /// SQLite lowers a value above its compile-time limit (2 GiB, 0x7fff0000 bytes, in the
    /// bundled build) to that limit; values above `i64::MAX` are refused.
    pub fn mmap_size(mut self, bytes: u64) -> Self {
        self.mmap_size = bytes;
        self
    }

    /// The most connections the pool opens (default [`SqliteStore::DEFAULT_MAX_CONNECTIONS`]),
    /// at least 1; the store's writer and its checkpointer are two more. The pool serves the claims' reads, handlers'
    /// transactions in atomic mode (each holds one while it runs) and the operators' methods.
    /// Ignored for an in-memory database, which has exactly one connection, for everything.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// Validates the settings, opens (creating it if missing) the database and applies the
    /// store's migrations.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a pool of no connections, a page cache of 0 KiB or a
    /// memory-mapped size above `i64::MAX` (checked before the database is opened),
    /// [`StoreError::Unavailable`] when the URL does not parse or the database cannot be
    /// opened, [`StoreError::Migration`] when a migration fails.
    pub async fn build(self) -> Result<SqliteStore, StoreError> {
        if self.max_connections == 0 {
            return Err(StoreError::Config(
                "a SQLite store needs at least one connection (max_connections 0)".into(),
            ));
        }
        if self.cache_size_kib == 0 {
            return Err(StoreError::Config(
                "a SQLite cache_size_kib of 0 is read by SQLite as unset (its default); \
                 ask for at least 1 KiB"
                    .into(),
            ));
        }
        if self.mmap_size > Self::MAX_MMAP_SIZE {
            return Err(StoreError::Config(
                format!(
                    "a SQLite mmap_size of {} bytes is more than SQLite accepts (at most {})",
                    self.mmap_size,
                    Self::MAX_MMAP_SIZE
                )
                .into(),
            ));
        }
        let options = SqliteConnectOptions::from_str(&self.url)
            .map_err(StoreError::unavailable)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(SqliteStore::BUSY_TIMEOUT)
            // Negative: a size in KiB rather than in pages.
            .pragma("cache_size", format!("-{}", self.cache_size_kib))
            .pragma("mmap_size", self.mmap_size.to_string());
        let in_memory = self.url.contains(":memory:") || self.url.contains("mode=memory");
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
                SqlitePoolOptions::new().max_connections(self.max_connections)
            }
            .connect_with(options.clone())
        })
        .await
        .map_err(StoreError::unavailable)?;
        SqliteStore::from_pool(pool).await
    }
}
