//! The SQLite store's schema: its migrations, applied under SQLite's write lock, and the retry
//! of statements SQLite refuses as busy before its busy handler could wait.

use std::time::Duration;

use sqlx::SqlitePool;

use super::SqliteStore;
use crate::migrate::{self, Migration, failed};
use idem_core::error::StoreError;

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
    Migration {
        version: 3,
        description: "columns for operators: the scope and its value",
        // Records written before keep replaying and show an empty scope. No index: operators'
        // listings read the table, and the claims' writes stay as cheap as they were.
        sql: "ALTER TABLE idem_records ADD COLUMN scope TEXT NOT NULL DEFAULT '';
        ALTER TABLE idem_records ADD COLUMN scope_value TEXT NOT NULL DEFAULT '';",
    },
];

/// Runs `attempt` again while SQLite answers `SQLITE_BUSY` before its busy handler could wait
/// (as when several processes open one new file at once and race to switch it to WAL), with
/// backoff, for at most [`SqliteStore::BUSY_TIMEOUT`].
pub(super) async fn while_busy<T, F>(mut attempt: impl FnMut() -> F) -> Result<T, sqlx::Error>
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
pub(super) async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
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
