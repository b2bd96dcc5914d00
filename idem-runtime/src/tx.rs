//! Atomic mode on sqlx: the [`Tx`] and [`AnyTx`] extractors, which join the HTTP faces
//! (`idem-axum`) to the transactions the SQL stores lend (`idem-sqlx`), neither of which
//! depends on the other.
//!
//! The HTTP flow puts the engine's `Lending` in the request's extensions when its store lends
//! transactions (`Capabilities`); the extractors borrow a transaction from it. When the handler
//! returns, the transaction is handed back, and the engine completes the record inside it before
//! committing.

use std::fmt;

use axum::extract::FromRequestParts;
use http::Extensions;
use http::request::Parts;

use crate::store::atomic::{self, AtomicDatabase, LentTransaction};
use idem_axum::Problem;
use idem_axum::atomic::{AtomicParam, lent};
use idem_core::endpoint::AtomicNeed;
use idem_core::engine::{LendError, Lending};
use idem_core::operation::Lent;
use idem_core::rejection::Rejection;

/// A database transaction that commits together with the idempotency record.
///
/// Take it as a handler parameter, under any name or alias (it is an extractor, so atomic mode
/// is chosen by the type, not by how the parameter is spelled), and send every write of the
/// operation through [`Tx::conn`]:
///
/// ```standalone_crate
/// use axum::{Json, http::StatusCode};
/// use idem_runtime::{Tx, idempotent};
/// use sqlx::Sqlite;
/// # #[derive(serde::Deserialize)] struct NewOrder { item: String }
///
/// #[idempotent(scope = "global")]
/// async fn create_order(mut tx: Tx<Sqlite>, Json(order): Json<NewOrder>)
///     -> Result<StatusCode, StatusCode>
/// {
///     sqlx::query("INSERT INTO orders (item) VALUES (?)")
///         .bind(&order.item)
///         .execute(tx.conn().await.map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?)
///         .await
///         .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
///     Ok(StatusCode::CREATED)
/// }
/// ```
///
/// - A 2xx, 3xx or 4xx response is stored in the transaction, which then commits: the writes
///   and the stored response become visible together.
/// - A 5xx response, an error or a panic rolls the transaction back and releases the key, so
///   the retry runs against a database the failed attempt never touched. A client that hangs up
///   changes nothing: the handler runs to its end and its transaction commits as above.
/// - If the process dies before the commit, none of the attempt's writes are left: on PostgreSQL
///   with one commit ([`AtomicCommits`](crate::AtomicCommits), the default) the claim was in the transaction
///   and the retry runs at once; otherwise only the claim is left, which a retry takes over once
///   the lease lapses. The operation's database effects happen exactly once.
/// - A transaction open longer than [`Builder::transaction_timeout`](crate::Builder::transaction_timeout)
///   (default 10 s) is stopped: the handler with it, its writes rolled back, the key released,
///   and the request answered `503` with `Retry-After`.
/// - Without an idempotency key the handler still runs in a transaction, committed unless the
///   response is a 5xx.
///
/// On PostgreSQL with one commit the transaction begins with the claim, before the handler runs;
/// with `commits = "two"` and on SQLite it begins at the first [`Tx::conn`] call: slow work done
/// before the first query (a call to a payment processor, say) then holds no database lock. On
/// SQLite it begins with `BEGIN IMMEDIATE`, taking the single write lock up front, so a handler
/// that reads and then writes cannot fail with `SQLITE_BUSY` halfway; keep slow non-database
/// work before the first query.
///
/// The application's tables must live in the store's database (the engine's `SqliteStore` or
/// `PostgresStore` pool, or any store implementing
/// [`AtomicStore`](crate::store::atomic::AtomicStore)); [`Builder::build`](crate::Builder::build)
/// fails when an `#[idempotent]` endpoint takes a `Tx` on a database whose transactions the store
/// does not offer. The extractor works under `#[idempotent]` and under
/// `IdempotencyLayer`; anywhere else it answers
/// `500 idempotency_misconfigured`. Take at most one per handler, as an argument of its own: an
/// `#[idempotent]` handler is offered transactions only when one of its arguments is a `Tx` or
/// an `AnyTx` (not one wrapped in another extractor). A `Tx` must not outlive its
/// handler: writes made through it after the handler returned are rolled back.
///
/// The programmatic API takes one too, in
/// [`Operation::run_atomic`](crate::Operation::run_atomic):
///
/// ```no_run
/// use idem_runtime::{Idempotency, Tx};
/// use sqlx::Postgres;
///
/// # async fn f(idempotency: Idempotency, order: u64) -> Result<(), Box<dyn std::error::Error>> {
/// let shipment = idempotency
///     .operation("shipping::ship")
///     .run_atomic("ship-order-1001", order, |mut tx: Tx<Postgres>, order| async move {
///         let id: i64 = sqlx::query_scalar("INSERT INTO shipments (order_id) VALUES ($1) RETURNING id")
///             .bind(order as i64)
///             .fetch_one(tx.conn().await?)
///             .await?;
///         Ok::<_, sqlx::Error>(id)
///     })
///     .await?
///     .into_inner();
/// # let _ = shipment; Ok(()) }
/// ```
pub struct Tx<DB: AtomicDatabase>(LentTransaction<DB>);

impl<DB: AtomicDatabase> Tx<DB> {
    /// The transaction's connection, beginning the transaction on first use.
    ///
    /// ```
    /// # async fn f(mut tx: idem_runtime::Tx<sqlx::Postgres>) -> Result<(), sqlx::Error> {
    /// sqlx::query("UPDATE accounts SET balance = balance - 10 WHERE id = 1")
    ///     .execute(tx.conn().await?)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn conn(&mut self) -> Result<&mut DB::Connection, sqlx::Error> {
        self.0.conn().await
    }

    /// A key for a call to another service that is stable across every retry of this request,
    /// including a retry that takes over after a crash: pass it as that service's idempotency
    /// key so the downstream effect happens once too. `purpose` tells apart several calls made
    /// by one request (`"charge"`, `"refund"`).
    ///
    /// The key is a UUID (version 8) derived from the idempotency record, never from the
    /// client's key in clear. Without an idempotency key it is random.
    pub fn downstream_key(&self, purpose: &str) -> String {
        self.0.downstream_key(purpose)
    }
}

/// The programmatic API's atomic mode hands out the same `Tx`.
impl<DB: AtomicDatabase> Lent for Tx<DB> {
    const DATABASE: &'static str = <DB as AtomicDatabase>::NAME;

    fn lent(lending: &Lending) -> Result<Self, LendError> {
        LentTransaction::lent(lending).map(Self)
    }
}

impl<DB: AtomicDatabase> fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("database", &<DB as AtomicDatabase>::NAME)
            .field("begun", &self.0.begun())
            .finish_non_exhaustive()
    }
}

impl<DB: AtomicDatabase> Tx<DB> {
    /// The transaction lent to the request whose extensions these are (the engine's flows put
    /// their `Lending` there).
    pub(crate) fn from_extensions(extensions: &Extensions) -> Result<Self, Rejection> {
        lent(extensions)
    }
}

impl<S: Send + Sync, DB: AtomicDatabase> FromRequestParts<S> for Tx<DB> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        Self::from_extensions(&parts.extensions).map_err(Problem)
    }
}

/// A transaction on whichever store the engine was built with, for applications that choose the
/// store at start-up (as the `payments` example does from `DATABASE_URL` and `IDEM_STORE`).
///
/// Take it as a handler parameter instead of [`Tx`]; match on it to reach the typed
/// transaction, which behaves exactly as a [`Tx`] parameter would. When the engine's store is not
/// a SQL store (`MemoryStore`), there is no transaction to share: the handler gets
/// [`AnyTx::None`], writes on its own connections and runs as without atomic mode.
///
/// ```
/// use axum::http::StatusCode;
/// use idem_runtime::{AnyTx, idempotent};
///
/// #[idempotent(scope = "global")]
/// async fn create_order(mut tx: AnyTx) -> Result<StatusCode, StatusCode> {
///     let insert = "INSERT INTO orders (item) VALUES ('book')";
///     let done = match &mut tx {
///         AnyTx::Sqlite(tx) => sqlx::query(insert).execute(tx.conn().await.map_err(internal)?).await.map(drop),
///         AnyTx::Postgres(tx) => sqlx::query(insert).execute(tx.conn().await.map_err(internal)?).await.map(drop),
///         _ => Ok(()), // a memory store: write through the app's own pool here
///     };
///     done.map_err(internal)?;
///     Ok(StatusCode::CREATED)
/// }
/// # fn internal(_: sqlx::Error) -> StatusCode { StatusCode::INTERNAL_SERVER_ERROR }
/// ```
#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "sqlite", feature = "postgres"))))]
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyTx {
    /// The engine's store lends SQLite transactions (`SqliteStore`).
    Sqlite(Tx<sqlx::Sqlite>),
    /// The engine's store lends PostgreSQL transactions (`PostgresStore`).
    Postgres(Tx<sqlx::Postgres>),
    /// The engine's store lends MySQL or MariaDB transactions (`MySqlStore`, feature `mysql`).
    #[cfg(feature = "mysql")]
    #[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
    MySql(Tx<sqlx::MySql>),
    /// The engine's store has no transactions to lend (`MemoryStore`, `RedisStore`): write as
    /// without atomic mode.
    None,
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl AnyTx {
    /// [`Tx::downstream_key`] of the transaction held; `None` without one.
    pub fn downstream_key(&self, purpose: &str) -> Option<String> {
        match self {
            Self::Sqlite(tx) => Some(tx.downstream_key(purpose)),
            Self::Postgres(tx) => Some(tx.downstream_key(purpose)),
            #[cfg(feature = "mysql")]
            Self::MySql(tx) => Some(tx.downstream_key(purpose)),
            Self::None => None,
        }
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl AnyTx {
    /// The transaction lent to the request whose extensions these are, on whichever database
    /// the store lends; [`AnyTx::None`] when it lends none.
    pub(crate) fn from_extensions(extensions: &Extensions) -> Result<Self, Rejection> {
        let Some(lending) = extensions.get::<Lending>() else {
            return Ok(Self::None);
        };
        if atomic::offered::<sqlx::Postgres>(lending.capabilities()).is_some() {
            Tx::from_extensions(extensions).map(Self::Postgres)
        } else if atomic::offered::<sqlx::Sqlite>(lending.capabilities()).is_some() {
            Tx::from_extensions(extensions).map(Self::Sqlite)
        } else if let Some(tx) = Self::mysql(extensions) {
            tx
        } else {
            Ok(Self::None)
        }
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl AnyTx {
    /// MySQL's transaction, when the store lends them.
    #[cfg(feature = "mysql")]
    fn mysql(extensions: &Extensions) -> Option<Result<Self, Rejection>> {
        let lending = extensions.get::<Lending>()?;
        atomic::offered::<sqlx::MySql>(lending.capabilities())?;
        Some(Tx::from_extensions(extensions).map(Self::MySql))
    }

    /// Without the `mysql` feature, no store lends MySQL transactions.
    #[cfg(not(feature = "mysql"))]
    fn mysql(_: &Extensions) -> Option<Result<Self, Rejection>> {
        None
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl<S: Send + Sync> FromRequestParts<S> for AnyTx {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        Self::from_extensions(&parts.extensions).map_err(Problem)
    }
}

impl<DB: AtomicDatabase> AtomicParam for Tx<DB> {
    fn need() -> AtomicNeed {
        AtomicNeed::new(<DB as AtomicDatabase>::NAME, |capabilities| {
            atomic::offered::<DB>(capabilities).is_some()
        })
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl AtomicParam for AnyTx {
    fn need() -> AtomicNeed {
        // Falls back to `AnyTx::None` on a store without transactions.
        AtomicNeed::new("any database", |_| true)
    }
}
