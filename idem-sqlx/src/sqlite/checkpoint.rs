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

    /// The task, for tests that check how it ends.
    #[cfg(test)]
    pub(super) fn task(&mut self) -> &mut JoinHandle<()> {
        &mut self.task
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
