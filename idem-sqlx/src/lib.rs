//! Idempotency records in SQL databases on sqlx: [`SqliteStore`] (feature `sqlite`),
//! [`PostgresStore`] (feature `postgres`) and [`MySqlStore`] (feature `mysql`, for MySQL and
//! MariaDB), and the transactions they lend to atomic mode ([`atomic`]): a handler's writes and
//! its record commit together.
//!
//! Applications use it through `idem-runtime` (features `sqlite`, `postgres`, `mysql`), which re-exports
//! the stores under `idem_runtime::store` and lends the transactions to handlers as
//! `idem_runtime::Tx`. It implements the store contract of `idem-core`
//! ([`Store`](idem_core::store::Store), [`Admin`](idem_core::store::Admin)) and atomic mode's
//! ([`idem_core::store::atomic`]).
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod atomic;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod migrate;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use mysql::{MySqlStore, MySqlStoreBuilder};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{PostgresStore, PostgresStoreBuilder};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use sqlite::{SqliteStore, SqliteStoreBuilder};
