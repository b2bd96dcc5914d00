//! The atomic-mode capability: a store whose records live in a SQL database lends the engine
//! transactions on that database, and completes records inside them.
//!
//! A handler in atomic mode takes a [`Tx`](crate::Tx); its writes and the record's completion
//! commit in one transaction. The SQLite and PostgreSQL stores implement [`AtomicStore`]; so can
//! a store of your own on one of these databases, by implementing the trait and offering itself
//! in [`Store::offer_capabilities`](super::Store::offer_capabilities):
//!
//! ```ignore
//! impl Store for MyPgStore {
//!     // ...
//!     fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
//!         capabilities.offer_atomic::<sqlx::Postgres>(self.clone());
//!     }
//! }
//! ```

use sqlx::Pool;

use super::capabilities::Capabilities;
use super::{BoxFuture, Completion, Fence, LeaseToken};
use crate::core::error::StoreError;
use crate::core::key::RecordKey;

/// A store that can complete a record inside a transaction on its own database.
///
/// The completion must be fenced exactly as [`Store::complete`](super::Store::complete) is:
/// [`Fence::Lost`] when `token` no longer owns the record, in which case the engine rolls the
/// transaction back.
pub trait AtomicStore<DB: AtomicDatabase>: Send + Sync + 'static {
    /// The pool of the database holding the records. The handler's transaction is begun on it,
    /// so the application's tables must live in that database.
    fn pool(&self) -> &Pool<DB>;

    /// Completes the record inside the transaction `conn` is in.
    fn complete_in<'a>(
        &'a self,
        conn: &'a mut DB::Connection,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
}

mod sealed {
    pub trait Sealed {}
}

/// A database atomic mode can share transactions on: `sqlx::Sqlite` (feature `sqlite`) and
/// `sqlx::Postgres` (feature `postgres`).
#[diagnostic::on_unimplemented(
    message = "`Tx<{Self}>` is not supported: atomic mode runs on `sqlx::Sqlite` or `sqlx::Postgres`",
    note = "enable the `sqlite` or `postgres` feature of idem-runtime"
)]
pub trait AtomicDatabase: sqlx::Database + sealed::Sealed {
    /// The database's name in messages (`"SQLite"`, `"PostgreSQL"`).
    const NAME: &'static str;
    /// How a transaction begins. SQLite takes its single write lock up front (`BEGIN
    /// IMMEDIATE`), so a handler that reads then writes cannot fail with `SQLITE_BUSY` halfway.
    const BEGIN: &'static str;
    #[doc(hidden)]
    fn slot(capabilities: &Capabilities) -> &Option<std::sync::Arc<dyn AtomicStore<Self>>>;
    #[doc(hidden)]
    fn slot_mut(
        capabilities: &mut Capabilities,
    ) -> &mut Option<std::sync::Arc<dyn AtomicStore<Self>>>;
}

#[cfg(feature = "sqlite")]
impl sealed::Sealed for sqlx::Sqlite {}

#[cfg(feature = "sqlite")]
impl AtomicDatabase for sqlx::Sqlite {
    const NAME: &'static str = "SQLite";
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    fn slot(capabilities: &Capabilities) -> &Option<std::sync::Arc<dyn AtomicStore<Self>>> {
        &capabilities.sqlite
    }
    fn slot_mut(
        capabilities: &mut Capabilities,
    ) -> &mut Option<std::sync::Arc<dyn AtomicStore<Self>>> {
        &mut capabilities.sqlite
    }
}

#[cfg(feature = "postgres")]
impl sealed::Sealed for sqlx::Postgres {}

#[cfg(feature = "postgres")]
impl AtomicDatabase for sqlx::Postgres {
    const NAME: &'static str = "PostgreSQL";
    const BEGIN: &'static str = "BEGIN";
    fn slot(capabilities: &Capabilities) -> &Option<std::sync::Arc<dyn AtomicStore<Self>>> {
        &capabilities.postgres
    }
    fn slot_mut(
        capabilities: &mut Capabilities,
    ) -> &mut Option<std::sync::Arc<dyn AtomicStore<Self>>> {
        &mut capabilities.postgres
    }
}
