//! idem's PostgreSQL store and atomic mode on [tokio-postgres] with a [deadpool-postgres] pool.
//!
//! - [`TokioPostgresStore`]: the records in the same table, with the same schema, migrations
//!   and rows as idem-sqlx's `PostgresStore`: the `idem` command and a sqlx instance read the
//!   same records, and an application moves from one driver to the other without losing one.
//!   Every statement is prepared once per connection and bound in binary; payloads are `bytea`.
//! - [`TokioPostgresTx`]: atomic mode. A handler's writes and its stored response commit in one
//!   transaction, pipelined: the `BEGIN` travels with the claim, the completion with the
//!   `COMMIT`, so a fresh request costs its own statements plus two round trips.
//! - [`diesel::DieselTx`] (feature `diesel-async`): atomic mode for handlers that write with
//!   diesel-async on `AsyncPgConnection`, from the application's diesel-async pool
//!   ([`TokioPostgresStoreBuilder::diesel`]), pipelined the same way.
//!
//! Written against the public contracts of `idem-core` (the store, atomic mode's hand-over,
//! the conformance, model and fault suites) and `idem-axum` (`atomic::AtomicParam` and `lent`,
//! how a transaction extractor of another database library joins `#[idempotent]`).
//!
//! ```no_run
//! use idem_tokio_postgres::TokioPostgresStore;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = TokioPostgresStore::connect("postgres://app@db.internal/payments").await?;
//! // `Idempotency::builder().store(store).build()?`, then handlers take a `TokioPostgresTx`.
//! # let _ = store;
//! # Ok(()) }
//! ```
//!
//! [tokio-postgres]: https://docs.rs/tokio-postgres
//! [deadpool-postgres]: https://docs.rs/deadpool-postgres

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod atomic;
mod db;
mod decode;
#[cfg(feature = "diesel-async")]
#[cfg_attr(docsrs, doc(cfg(feature = "diesel-async")))]
pub mod diesel;
mod gate;
mod schema;
mod statements;
mod store;

pub use atomic::{Savepoint, TokioPostgresTx, TxError};
pub use store::{TokioPostgresStore, TokioPostgresStoreBuilder};

/// The driver and the pool, as this crate uses them: build a pool or a statement's parameters
/// with the same versions.
pub use {deadpool_postgres, tokio_postgres};
