//! Atomic mode on sqlx: a store whose records live in a SQL database lends the engine
//! transactions on that database and completes records inside them ([`AtomicStore`]); a store
//! may also claim a record inside the transaction it then lends (one commit per request), by
//! offering `idem-core`'s [`ClaimInTransaction`](idem_core::store::atomic::ClaimInTransaction)
//! with its open transactions as [`ClaimedTransaction`]s.
//!
//! A handler in atomic mode takes a `Tx`; its writes and the record's completion
//! commit in one transaction. The SQLite, PostgreSQL and MySQL stores implement [`AtomicStore`]; so can
//! a store of your own on one of these databases, by implementing it and offering itself in
//! [`Store::offer_capabilities`](idem_core::store::Store::offer_capabilities):
//!
//! ```ignore
//! impl Store for MyPgStore {
//!     // ...
//!     fn offer_capabilities(self: &Arc<Self>, capabilities: &mut Capabilities) {
//!         idem_sqlx::atomic::offer::<sqlx::Postgres>(capabilities, self.clone());
//!     }
//! }
//! ```

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Pool;

use idem_core::engine::{LendError, Lending};
use idem_core::error::StoreError;
use idem_core::key::RecordKey;
use idem_core::store::atomic::OpenTransaction;
use idem_core::store::{BoxFuture, Capabilities, Completion, Fence, LeaseToken};

/// A store that can complete a record inside a transaction on its own database.
///
/// The completion must be fenced exactly as [`Store::complete`](idem_core::store::Store::complete) is:
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

/// An open transaction holding a record's claim, made by a store that claims inside
/// transactions. Dropping it rolls back, claim included.
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

/// The transactions a store offers on `DB`: what [`Capabilities`] holds them as.
struct Offered<DB: AtomicDatabase>(Arc<dyn AtomicStore<DB>>);

impl<DB: AtomicDatabase> Clone for Offered<DB> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// Offers `store`'s transactions on `DB` to the engine (atomic mode): call it from
/// [`Store::offer_capabilities`](idem_core::store::Store::offer_capabilities).
pub fn offer<DB: AtomicDatabase>(capabilities: &mut Capabilities, store: Arc<dyn AtomicStore<DB>>) {
    capabilities.offer_transactions(Offered(store));
}

/// The transactions on `DB` the engine's store offered, if it did.
pub fn offered<DB: AtomicDatabase>(
    capabilities: &Capabilities,
) -> Option<&Arc<dyn AtomicStore<DB>>> {
    capabilities
        .transactions::<Offered<DB>>()
        .map(|offered| &offered.0)
}

/// A claim made inside the open transaction `claimed`, as the engine parks it for the
/// operation's [`LentTransaction`] to take.
pub fn claimed<DB: AtomicDatabase>(
    claimed: Box<dyn ClaimedTransaction<DB>>,
) -> Box<dyn OpenTransaction> {
    Box::new(Handed::Claimed(claimed))
}

/// A transaction lent to an operation (what a handler's `Tx<DB>` holds): begun on the store's
/// pool at its first query, or the one the engine began with the record's claim in it. Handed
/// back to the engine when dropped, which completes the record inside it and commits, or rolls
/// it back.
pub struct LentTransaction<DB: AtomicDatabase> {
    store: Arc<dyn AtomicStore<DB>>,
    open: Option<Open<DB>>,
    lending: Lending,
}

/// An open lent transaction.
enum Open<DB: AtomicDatabase> {
    /// Begun at the operation's first query (the claim committed before).
    Begun(Begun<DB>),
    /// Begun by the engine with the record's claim in it (one commit).
    Claimed(Box<dyn ClaimedTransaction<DB>>),
}

impl<DB: AtomicDatabase> LentTransaction<DB> {
    /// The transaction on `DB` that `lending` lends, if its store offers them and none was
    /// lent yet.
    pub fn lent(lending: &Lending) -> Result<Self, LendError> {
        let Offered(store) = lending.lend::<Offered<DB>>()?;
        Ok(Self {
            store,
            open: None,
            lending: lending.clone(),
        })
    }

    /// The transaction's connection, beginning the transaction on first use.
    pub async fn conn(&mut self) -> Result<&mut DB::Connection, sqlx::Error> {
        let open = match self.open.take() {
            Some(open) => open,
            None => match self.take_parked() {
                Some(claimed) => Open::Claimed(claimed),
                None => {
                    self.lending.open();
                    let begin = DB::begin(self.lending.statement_timeout()).into_owned();
                    let begun = self.store.pool().begin_with(sqlx::AssertSqlSafe(begin));
                    Open::Begun(Begun(Some(begun.await?)))
                }
            },
        };
        Ok(match self.open.insert(open) {
            Open::Begun(tx) => tx.conn(),
            Open::Claimed(claimed) => claimed.conn(),
        })
    }

    /// The transaction the engine parked with the claim, if it is on `DB`.
    fn take_parked(&self) -> Option<Box<dyn ClaimedTransaction<DB>>> {
        let parked = self.lending.take_parked()?;
        match parked.into_any().downcast::<Handed<DB>>() {
            Ok(handed) => match *handed {
                Handed::Claimed(claimed) => Some(claimed),
                Handed::Begun { .. } => None,
            },
            // Parked on another database than this transaction's: nothing to take. (The
            // engine's store claims on one database; dropping it rolls back.)
            Err(_) => None,
        }
    }

    /// Whether the transaction has begun.
    pub fn begun(&self) -> bool {
        self.open.is_some()
    }

    /// A key for a call to another service, stable across every retry of this attempt's
    /// request: derived from the record key, random without one.
    pub fn downstream_key(&self, purpose: &str) -> String {
        self.lending.downstream_key(purpose)
    }
}

impl<DB: AtomicDatabase> Drop for LentTransaction<DB> {
    fn drop(&mut self) {
        // Handed back to the engine, which commits or rolls it back.
        let handed = match self.open.take() {
            None => return,
            Some(Open::Claimed(claimed)) => Handed::Claimed(claimed),
            Some(Open::Begun(tx)) => Handed::Begun {
                tx,
                store: self.store.clone(),
            },
        };
        self.lending.hand_back(Box::new(handed));
    }
}

/// A lent transaction handed back to the engine, or parked by it with a claim.
enum Handed<DB: AtomicDatabase> {
    /// Begun at the operation's first query: the record completes through `store`.
    Begun {
        tx: Begun<DB>,
        store: Arc<dyn AtomicStore<DB>>,
    },
    /// Begun with the record's claim in it.
    Claimed(Box<dyn ClaimedTransaction<DB>>),
}

impl<DB: AtomicDatabase> OpenTransaction for Handed<DB> {
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(async move {
            let (mut tx, store) = match *self {
                Handed::Begun { tx, store } => (tx, store),
                Handed::Claimed(claimed) => {
                    let completed = claimed.complete_and_commit(key, token, completion).await;
                    return completed.map_err(aborted_by_the_work);
                }
            };
            let completed = store.complete_in(tx.conn(), key, token, completion).await;
            match completed.map_err(aborted_by_the_work)? {
                // Another request took the record over: our writes must not commit beside its
                // own. Dropping the transaction rolls it back.
                Fence::Lost => Ok(Fence::Lost),
                Fence::Held => {
                    tx.commit().await.map_err(StoreError::unavailable)?;
                    Ok(Fence::Held)
                }
            }
        })
    }

    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<(), StoreError>> {
        Box::pin(async move {
            match *self {
                Handed::Begun { tx, .. } => tx.commit().await.map_err(StoreError::unavailable),
                // Never parked without a record: dropping it rolls back.
                Handed::Claimed(_) => Err(StoreError::unavailable(std::io::Error::other(
                    "a claim's transaction commits only with its record",
                ))),
            }
        })
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// A transaction begun on the store's pool for an operation. It ends by [`commit`](Self::commit),
/// or when dropped, by a rollback; either way the session settings its `BEGIN` changed (MySQL's
/// timeouts, which outlive a transaction) are put back before the connection returns to the
/// pool ([`AtomicDatabase::commit`], [`AtomicDatabase::roll_back`]).
struct Begun<DB: AtomicDatabase>(Option<sqlx::Transaction<'static, DB>>);

impl<DB: AtomicDatabase> Begun<DB> {
    fn conn(&mut self) -> &mut DB::Connection {
        // `None` only once ended, and an ended transaction is never used again.
        self.0.as_deref_mut().expect("an open transaction")
    }

    async fn commit(mut self) -> Result<(), sqlx::Error> {
        match self.0.take() {
            Some(tx) => DB::commit(tx).await,
            None => Ok(()),
        }
    }
}

impl<DB: AtomicDatabase> Drop for Begun<DB> {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            DB::roll_back(tx);
        }
    }
}

/// A completion that failed because the work's own statement had already aborted the
/// transaction (PostgreSQL's SQLSTATE `25P02`, "current transaction is aborted"): the work's
/// failure, [`StoreError::Aborted`], not the store's. Any other error is left as it is.
fn aborted_by_the_work(error: StoreError) -> StoreError {
    /// PostgreSQL's `in_failed_sql_transaction`.
    const IN_FAILED_TRANSACTION: &str = "25P02";
    match error {
        StoreError::Unavailable(source)
            if source
                .downcast_ref::<sqlx::Error>()
                .and_then(|e| e.as_database_error()?.code())
                .is_some_and(|code| code == IN_FAILED_TRANSACTION) =>
        {
            StoreError::Aborted(source)
        }
        other => other,
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A database atomic mode can share transactions on: `sqlx::Sqlite` (feature `sqlite`),
/// `sqlx::Postgres` (feature `postgres`) and `sqlx::MySql` (feature `mysql`).
#[diagnostic::on_unimplemented(
    message = "`Tx<{Self}>` is not supported: atomic mode runs on `sqlx::Sqlite`, `sqlx::Postgres` or `sqlx::MySql`",
    note = "enable the `sqlite`, `postgres` or `mysql` feature of idem-runtime"
)]
pub trait AtomicDatabase: sqlx::Database + sealed::Sealed {
    /// The database's name in messages (`"SQLite"`, `"PostgreSQL"`, `"MySQL"`).
    const NAME: &'static str;
    /// How a transaction begins. SQLite takes its single write lock up front (`BEGIN
    /// IMMEDIATE`), so a handler that reads then writes cannot fail with `SQLITE_BUSY` halfway.
    const BEGIN: &'static str;
    /// How a transaction lent to an operation begins: [`BEGIN`](Self::BEGIN), and where the
    /// database has them, timeouts that bound each of its statements and lock waits
    /// (PostgreSQL's `statement_timeout` and `lock_timeout`; MySQL's lock waits, in whole
    /// seconds, and MariaDB's `max_statement_time`; SQLite's connections wait for its one lock
    /// at most their busy timeout).
    #[doc(hidden)]
    fn begin(statement_timeout: Duration) -> std::borrow::Cow<'static, str>;

    /// Commits a transaction begun with [`begin`](Self::begin), putting back what it changed
    /// beyond the transaction.
    #[doc(hidden)]
    fn commit(tx: sqlx::Transaction<'static, Self>) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        Box::pin(tx.commit())
    }

    /// Rolls back a transaction begun with [`begin`](Self::begin) that is being dropped,
    /// putting back what it changed beyond the transaction. sqlx's own: the `ROLLBACK` goes out
    /// before the connection is used again.
    #[doc(hidden)]
    fn roll_back(tx: sqlx::Transaction<'static, Self>) {
        drop(tx);
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
}

#[cfg(feature = "mysql")]
impl sealed::Sealed for sqlx::MySql {}

#[cfg(feature = "mysql")]
impl AtomicDatabase for sqlx::MySql {
    const NAME: &'static str = "MySQL";
    const BEGIN: &'static str = "BEGIN";
    /// Keeps the session's lock wait (and, on MariaDB, statement) timeouts in user variables,
    /// bounds them by the transaction's statement timeout, then `BEGIN` and the savepoint
    /// [`MYSQL_SAVEPOINT`], which the completion checks is still there. MySQL has no setting
    /// scoped to a transaction: [`commit`](Self::commit) and [`roll_back`](Self::roll_back) put
    /// the kept values back, so the pooled connection goes back with the pool's own settings.
    fn begin(statement_timeout: Duration) -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Owned(format!(
            "{MYSQL_KEEP_SESSION}; {}; BEGIN; SAVEPOINT {MYSQL_SAVEPOINT}",
            mysql_session_timeouts(statement_timeout)
        ))
    }

    /// The session's settings put back, then `COMMIT`, in one round trip. Nothing commits
    /// unless they were put back. The `BEGIN` after it keeps sqlx's count of open transactions
    /// true: that empty transaction is rolled back when the connection returns to the pool.
    fn commit(
        mut tx: sqlx::Transaction<'static, Self>,
    ) -> BoxFuture<'static, Result<(), sqlx::Error>> {
        Box::pin(async move {
            let sql = format!("{MYSQL_RESTORE_SESSION}; COMMIT; BEGIN");
            sqlx::Executor::execute(&mut *tx, sqlx::AssertSqlSafe(sql)).await?;
            drop(tx);
            Ok(())
        })
    }

    /// Rolls back and puts the session's settings back, in a task (a drop cannot wait), before
    /// the connection returns to the pool. Without a runtime to run it on, sqlx's rollback alone.
    fn roll_back(mut tx: sqlx::Transaction<'static, Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return drop(tx);
        };
        runtime.spawn(async move {
            let sql = format!("ROLLBACK; {MYSQL_RESTORE_SESSION}; BEGIN");
            if let Err(error) = sqlx::Executor::execute(&mut *tx, sqlx::AssertSqlSafe(sql)).await {
                tracing::warn!(
                    %error,
                    "could not roll back a lent MySQL transaction and restore its session's \
                     timeouts"
                );
            }
        });
    }
}

/// Keeps what [`mysql_session_timeouts`] changes in user variables of the session.
#[cfg(feature = "mysql")]
const MYSQL_KEEP_SESSION: &str = "SET @idem_lock_wait = @@SESSION.innodb_lock_wait_timeout, \
     @idem_mdl_wait = @@SESSION.lock_wait_timeout \
     /*M!100100 , @idem_statement_time = @@SESSION.max_statement_time */";

/// Puts back what [`MYSQL_KEEP_SESSION`] kept (the server's global value where nothing was
/// kept: a handler that reset its session), and clears the user variables.
#[cfg(feature = "mysql")]
const MYSQL_RESTORE_SESSION: &str = "SET SESSION \
     innodb_lock_wait_timeout = COALESCE(@idem_lock_wait, @@GLOBAL.innodb_lock_wait_timeout), \
     lock_wait_timeout = COALESCE(@idem_mdl_wait, @@GLOBAL.lock_wait_timeout) \
     /*M!100100 , max_statement_time = \
         COALESCE(@idem_statement_time, @@GLOBAL.max_statement_time) */, \
     @idem_lock_wait = NULL, @idem_mdl_wait = NULL /*M!100100 , @idem_statement_time = NULL */";

/// The savepoint a transaction lent on MySQL begins with: gone when InnoDB rolled the
/// transaction back under the handler (a deadlock), which the completion checks first.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_SAVEPOINT: &str = "idem_tx";

#[cfg(feature = "mysql")]
/// The statement that bounds a session's lock waits (whole seconds, at least one) and, on
/// MariaDB (inside its executable comment), each statement's running time.
pub(crate) fn mysql_session_timeouts(timeout: Duration) -> String {
    let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    format!(
        "SET SESSION innodb_lock_wait_timeout = {seconds}, lock_wait_timeout = {seconds} \
         /*M!100100 , max_statement_time = {statement:.3} */",
        seconds = seconds.max(1),
        statement = timeout.as_secs_f64().max(0.001),
    )
}
