//! Atomic mode's capabilities: a store whose records live in a SQL database lends the engine
//! transactions on that database and completes records inside them ([`AtomicStore`]); a store
//! may also claim a record inside the transaction it then lends ([`ClaimInTransaction`], one
//! commit per request).
//!
//! A handler in atomic mode takes a [`Tx`](crate::Tx); its writes and the record's completion
//! commit in one transaction. The SQLite and PostgreSQL stores implement [`AtomicStore`], and
//! PostgreSQL [`ClaimInTransaction`]; so can a store of your own on one of these databases, by
//! implementing the traits and offering itself in
//! [`Store::offer_capabilities`](super::Store::offer_capabilities):
//!
//! ```ignore
//! impl Store for MyPgStore {
//!     // ...
//!     fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
//!         capabilities.offer_atomic::<sqlx::Postgres>(self.clone());
//!         capabilities.offer_claim_in_transaction::<sqlx::Postgres>(self.clone());
//!     }
//! }
//! ```

use std::time::Duration;

use sqlx::Pool;

use super::{BoxFuture, ClaimRequest, Completion, Fence, LeaseToken};
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

/// A store that can claim a record inside a transaction that stays open while the operation
/// runs, then carries its writes and its completion to one commit
/// ([`Commits::One`](crate::Commits::One)).
///
/// Nobody else sees such a claim until it commits: a duplicate waits on the open transaction,
/// and a crash leaves nothing behind (the transaction aborts with its connection).
pub trait ClaimInTransaction<DB: AtomicDatabase>: AtomicStore<DB> {
    /// Begins a transaction and claims the record in it, waiting up to `lock_wait` for another
    /// transaction that holds a claim of the same key. The operation's statements
    /// that follow in the transaction may each run, or wait for a lock, for `statement_timeout`.
    fn claim_in_transaction<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> BoxFuture<'a, Result<TransactionClaim<DB>, StoreError>>;
}

/// How [`ClaimInTransaction::claim_in_transaction`] ended.
#[non_exhaustive]
pub enum TransactionClaim<DB: AtomicDatabase> {
    /// The record is the caller's, inside the open transaction.
    Acquired(Box<dyn ClaimedTransaction<DB>>),
    /// Another transaction holds a claim of the key and did not finish within the
    /// lock wait: the first request is still running.
    InFlight,
    /// A committed record holds the key (a result to replay, an expired record not swept yet, a
    /// claim made outside a transaction): the engine claims it the ordinary way, which reads it.
    Stored,
}

/// An open transaction holding a record's claim. Dropping it rolls back, claim included.
pub trait ClaimedTransaction<DB: AtomicDatabase>: Send {
    /// The transaction's connection, for the operation's statements.
    fn conn(&mut self) -> &mut DB::Connection;

    /// Completes the record and commits. Anything but `Ok(Fence::Held)` leaves nothing of the
    /// attempt committed.
    fn complete_and_commit<'a>(
        self: Box<Self>,
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
    /// How a transaction lent to an operation begins: [`BEGIN`](Self::BEGIN), and where the
    /// database has them, timeouts that bound each of its statements and lock waits
    /// (PostgreSQL's `statement_timeout` and `lock_timeout`; SQLite's connections wait for its
    /// one lock at most their busy timeout).
    #[doc(hidden)]
    fn begin(statement_timeout: Duration) -> std::borrow::Cow<'static, str>;
    /// This database's value in a [`PerDatabase`].
    #[doc(hidden)]
    fn of<F: Family>(values: &PerDatabase<F>) -> &F::Of<Self>;
    /// This database's value in a [`PerDatabase`], to change it.
    #[doc(hidden)]
    fn of_mut<F: Family>(values: &mut PerDatabase<F>) -> &mut F::Of<Self>;
}

/// A type for each database: what a [`PerDatabase`] holds.
#[doc(hidden)]
pub trait Family {
    /// The value for `DB`.
    type Of<DB: AtomicDatabase>: Default;
}

/// One value per database atomic mode supports, each typed by its database: the typed slots of
/// the store's capabilities and of the transactions handed to an operation.
#[doc(hidden)]
pub struct PerDatabase<F: Family> {
    #[cfg(feature = "sqlite")]
    sqlite: F::Of<sqlx::Sqlite>,
    #[cfg(feature = "postgres")]
    postgres: F::Of<sqlx::Postgres>,
}

impl<F: Family> Default for PerDatabase<F> {
    fn default() -> Self {
        Self {
            #[cfg(feature = "sqlite")]
            sqlite: Default::default(),
            #[cfg(feature = "postgres")]
            postgres: Default::default(),
        }
    }
}

impl<F: Family> PerDatabase<F> {
    /// `DB`'s value.
    pub(crate) fn get<DB: AtomicDatabase>(&self) -> &F::Of<DB> {
        DB::of(self)
    }

    /// `DB`'s value, to change it.
    pub(crate) fn get_mut<DB: AtomicDatabase>(&mut self) -> &mut F::Of<DB> {
        DB::of_mut(self)
    }
}

#[cfg(feature = "sqlite")]
impl sealed::Sealed for sqlx::Sqlite {}

#[cfg(feature = "sqlite")]
impl AtomicDatabase for sqlx::Sqlite {
    const NAME: &'static str = "SQLite";
    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    fn begin(_: Duration) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed(Self::BEGIN)
    }
    fn of<F: Family>(values: &PerDatabase<F>) -> &F::Of<Self> {
        &values.sqlite
    }
    fn of_mut<F: Family>(values: &mut PerDatabase<F>) -> &mut F::Of<Self> {
        &mut values.sqlite
    }
}

#[cfg(feature = "postgres")]
impl sealed::Sealed for sqlx::Postgres {}

#[cfg(feature = "postgres")]
impl AtomicDatabase for sqlx::Postgres {
    const NAME: &'static str = "PostgreSQL";
    const BEGIN: &'static str = "BEGIN";
    fn begin(statement_timeout: Duration) -> std::borrow::Cow<'static, str> {
        let ms = statement_timeout.as_millis().clamp(1, i32::MAX as u128);
        std::borrow::Cow::Owned(format!(
            "BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}"
        ))
    }
    fn of<F: Family>(values: &PerDatabase<F>) -> &F::Of<Self> {
        &values.postgres
    }
    fn of_mut<F: Family>(values: &mut PerDatabase<F>) -> &mut F::Of<Self> {
        &mut values.postgres
    }
}
