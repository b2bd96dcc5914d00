//! The SQLite store's writer: one connection of its own for the writes of the engine's path
//! (claims, completions, releases, renewals and the sweep), taken in turn within the process.
//!
//! SQLite lets one connection write at a time whatever the pool holds. Writes spread over a
//! pool's connections wait for that lock in SQLite's busy handler, which sleeps and polls, and
//! each connection drops its whole page cache when it begins a transaction after another one
//! committed. One writer queues them in the process instead, keeps its cache, and leaves the
//! pool to reads.

use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, Sqlite, SqliteConnection, SqlitePool};
use tokio::sync::{Mutex, MutexGuard};

use super::checkpoint::{self, Checkpointer};

/// The writer's connection, opened again on the next turn when it failed.
#[derive(Debug)]
pub(super) struct Writer {
    options: SqliteConnectOptions,
    conn: Mutex<Option<SqliteConnection>>,
    checkpointer: Checkpointer,
}

/// A connection to write on, held by one write until it is dropped: the writer, or one of the
/// pool's for a store that has no writer (on an in-memory database).
pub(super) enum Turn<'a> {
    Writer(MutexGuard<'a, Option<SqliteConnection>>, &'a Checkpointer),
    Pool(PoolConnection<Sqlite>),
}

impl Writer {
    /// A writer for the database of `pool`, connected with the pool's own options but for its
    /// checkpoints, which a [`Checkpointer`] makes in the background; `None` for an in-memory
    /// database (SQLite names no file for it), which another connection would not see.
    pub(super) async fn for_pool(pool: &SqlitePool) -> Result<Option<Self>, sqlx::Error> {
        let file: String =
            sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                .fetch_one(pool)
                .await?;
        if file.is_empty() {
            return Ok(None);
        }
        let pooled = SqliteConnectOptions::clone(&pool.connect_options());
        let options = pooled
            .clone()
            .pragma("wal_autocheckpoint", checkpoint::BACKSTOP_PAGES.to_string())
            .pragma(
                "journal_size_limit",
                checkpoint::LOG_LIMIT_BYTES.to_string(),
            );
        let conn = options.connect().await?;
        Ok(Some(Self {
            options,
            conn: Mutex::new(Some(conn)),
            checkpointer: Checkpointer::spawn(pool.clone(), pooled),
        }))
    }

    /// Waits for the writer, in the order writes asked for it; opens its connection again first
    /// if the last one failed. Once the store's pool is `closed`, closes the connection and
    /// refuses every write, as the pool does.
    pub(super) async fn turn(&self, closed: bool) -> Result<Turn<'_>, sqlx::Error> {
        let mut conn = self.conn.lock().await;
        if closed {
            if let Some(conn) = conn.take() {
                // Closing only says goodbye to the worker thread: its error changes nothing.
                let _ = conn.close().await;
            }
            return Err(sqlx::Error::PoolClosed);
        }
        if conn.is_none() {
            tracing::info!("opening the SQLite store's writer connection again");
            *conn = Some(self.options.connect().await?);
        }
        Ok(Turn::Writer(conn, &self.checkpointer))
    }

    /// Drops the writer's connection, as a failure of it does, so the next turn opens another.
    #[cfg(test)]
    pub(super) async fn lose_connection(&self) {
        self.conn.lock().await.take();
    }

    /// Whether the writer holds a connection now.
    #[cfg(test)]
    pub(super) async fn connected(&self) -> bool {
        self.conn.lock().await.is_some()
    }
}

impl Turn<'_> {
    /// The connection to write on.
    pub(super) fn conn(&mut self) -> &mut SqliteConnection {
        match self {
            Turn::Writer(conn, _) => conn
                .as_mut()
                .expect("a turn holds a connection until `checked` drops it"),
            Turn::Pool(conn) => conn,
        }
    }

    /// Passes on what a statement on this turn's connection returned, dropping the writer's
    /// connection when the error is not SQLite's answer to the statement (a lost or crashed
    /// connection): the next turn opens another, so the store recovers by itself. (The pool
    /// tests its own connections when they return.) A write the writer made wakes the
    /// checkpointer.
    pub(super) fn checked<T>(self, result: Result<T, sqlx::Error>) -> Result<T, sqlx::Error> {
        let Turn::Writer(mut conn, checkpointer) = self else {
            return result;
        };
        match &result {
            Ok(_) => checkpointer.wrote(),
            Err(sqlx::Error::Database(_)) => {}
            Err(error) => {
                tracing::warn!(
                    error = error as &dyn std::error::Error,
                    "the SQLite store's writer connection failed; the next write opens another"
                );
                conn.take();
            }
        }
        result
    }
}
