//! The SQLite store's checkpointer: copies the pages the writer commits from the write-ahead log
//! into the database file, on a connection of its own, so the writer does not stop to do it.
//!
//! In WAL mode the connection whose commit takes the log past its `wal_autocheckpoint` pages
//! copies them into the database and syncs the file before its commit returns. On the writer
//! that pause holds up every write queued behind it, and beside a large table it is long: the
//! pages claims dirty are spread over the whole key index, so a checkpoint writes about one page
//! of the file per claim. The checkpointer makes that copy in the background, in `PASSIVE` mode
//! (it never waits for, nor blocks, readers or the writer), a moment after writes.
//!
//! Only a complete checkpoint lets the log start again from its beginning, and a copy made
//! while the writer keeps writing is rarely complete. So the writer keeps a threshold of its
//! own, [`BACKSTOP_PAGES`]: past it, the writer copies what the checkpointer left (little by
//! then) and the log starts over. The log's file is cut back to [`LOG_LIMIT_BYTES`] when it
//! does, should a long reader have let it grow beyond.

use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection, SqlitePool};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// How long after a write the checkpointer copies what was written since its last copy.
pub(super) const PERIOD: Duration = Duration::from_millis(50);

/// The writer's own checkpoint threshold, in pages of the log (32 MiB at SQLite's 4 KiB pages);
/// SQLite's default is 1 000.
pub(super) const BACKSTOP_PAGES: u32 = 8_192;

/// The size the writer cuts the log's file back to when the log starts over.
pub(super) const LOG_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// The background task; stopped when dropped (with the store's writer).
#[derive(Debug)]
pub(super) struct Checkpointer {
    wrote: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts checkpointing the database of `pool` on a connection opened with `options` when
    /// first needed. The task ends once the pool is closed.
    pub(super) fn spawn(pool: SqlitePool, options: SqliteConnectOptions) -> Self {
        let wrote = Arc::new(Notify::new());
        let task = tokio::spawn(run(pool, options, wrote.clone()));
        Self { wrote, task }
    }

    /// Says that the writer committed: the checkpointer copies it within [`PERIOD`].
    pub(super) fn wrote(&self) {
        self.wrote.notify_one();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What one `PRAGMA wal_checkpoint(PASSIVE)` reported: whether a lock stopped it, the pages in
/// the log and how many of them are now in the database.
type Report = (i64, i64, i64);

async fn run(pool: SqlitePool, options: SqliteConnectOptions, wrote: Arc<Notify>) {
    let mut conn: Option<SqliteConnection> = None;
    // Whether the last round failed: a failure is logged as a warning once, until one succeeds.
    let mut failing = false;
    loop {
        wrote.notified().await;
        tokio::time::sleep(PERIOD).await;
        if pool.is_closed() {
            break;
        }
        let copied = match &mut conn {
            Some(open) => checkpoint(open).await,
            None => match options.connect().await {
                Ok(opened) => checkpoint(conn.insert(opened)).await,
                Err(error) => Err(error),
            },
        };
        match copied {
            Ok((_, log, copied)) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("the SQLite store's checkpoints run again");
                }
                tracing::trace!(log, copied, "SQLite checkpoint");
            }
            Err(error) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "the SQLite store's background checkpoint failed; the writer's own \
                         bound the log until it runs again, after a later write"
                    );
                }
                if !matches!(error, sqlx::Error::Database(_)) {
                    conn = None;
                }
            }
        }
    }
    if let Some(conn) = conn {
        // Closing only says goodbye to the worker thread: its error changes nothing.
        let _ = conn.close().await;
    }
}

async fn checkpoint(conn: &mut SqliteConnection) -> Result<Report, sqlx::Error> {
    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(conn)
        .await
}

#[cfg(test)]
mod tests {
    //! The task's own life: it opens its connection at the first write, keeps going after a
    //! round that could not open one, and ends once the pool closes.

    use std::path::{Path, PathBuf};

    use super::*;

    /// Long enough for a round a write started to have run, many times its `PERIOD`.
    const SETTLE: Duration = Duration::from_millis(500);

    /// A database file in a directory of its own that does not exist yet.
    fn missing_database() -> PathBuf {
        std::env::temp_dir()
            .join(format!(
                "idem-checkpointer-{}-{:08x}",
                std::process::id(),
                fastrand::u32(..)
            ))
            .join("store.db")
    }

    fn spawn(pool: &SqlitePool, file: &Path) -> Checkpointer {
        let options = SqliteConnectOptions::new()
            .filename(file)
            .create_if_missing(true);
        Checkpointer::spawn(pool.clone(), options)
    }

    /// Whether `file` exists within 5 s (the checkpointer opened it, creating it).
    async fn appears(file: &Path) -> bool {
        for _ in 0..100 {
            if file.exists() {
                return true;
            }
            tokio::time::sleep(PERIOD).await;
        }
        false
    }

    #[tokio::test]
    async fn the_connection_opens_at_a_write_and_again_after_a_round_that_could_not() {
        let pool = SqlitePool::connect_lazy("sqlite::memory:").unwrap();
        let file = missing_database();
        let dir = file.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let checkpointer = spawn(&pool, &file);
        tokio::time::sleep(SETTLE).await;
        assert!(!file.exists(), "no write, no connection");

        // The directory goes: the next write's round cannot open the database.
        std::fs::remove_dir(dir).unwrap();
        checkpointer.wrote();
        tokio::time::sleep(SETTLE).await;
        // It is back, but rounds follow writes: none is tried until the next one.
        std::fs::create_dir(dir).unwrap();
        tokio::time::sleep(SETTLE).await;
        assert!(
            !file.exists(),
            "a failed round is not retried before a write"
        );
        checkpointer.wrote();
        assert!(
            appears(&file).await,
            "the round after a failed one opens it"
        );
        drop(checkpointer);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn the_task_ends_at_the_first_write_after_its_pool_closed() {
        let pool = SqlitePool::connect_lazy("sqlite::memory:").unwrap();
        let file = missing_database();
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let mut checkpointer = spawn(&pool, &file);
        checkpointer.wrote();
        assert!(appears(&file).await);
        pool.close().await;
        checkpointer.wrote();
        let ended = tokio::time::timeout(Duration::from_secs(5), &mut checkpointer.task).await;
        assert!(
            matches!(ended, Ok(Ok(()))),
            "the task ended by itself, not aborted"
        );
        std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    }
}
