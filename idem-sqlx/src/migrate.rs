//! The migrator's sqlx side: each store embeds its schema as a list of idem-sql's
//! [`Migration`]s, asks [`plan`] which are missing, and applies them with sqlx in one transaction
//! under a lock (PostgreSQL: an advisory lock; SQLite: `BEGIN IMMEDIATE`; MySQL: a named lock).

use idem_core::error::StoreError;

/// What SQLite's and MySQL's schemas are written as (PostgreSQL's is idem-sql's own).
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) use idem_sql::migrate::Migration;
pub(crate) use idem_sql::migrate::plan;

/// Wraps a backend error raised while applying migration `version`.
pub(crate) fn failed(
    version: i64,
) -> impl FnOnce(sqlx::Error) -> StoreError + Copy + Send + 'static {
    move |err| StoreError::Migration {
        version,
        source: Box::new(err),
    }
}
