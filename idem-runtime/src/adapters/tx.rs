//! Atomic mode, as the HTTP faces offer it: the handler's database writes and the stored
//! response commit together.
//!
//! The engine puts a `TxOffer` in the request's extensions when its store lends transactions
//! (`Capabilities`); the [`Tx`] and [`AnyTx`] extractors take it. When the handler returns,
//! the transaction it began is handed back through the offer, and the engine completes the
//! record inside it before committing.

use std::fmt;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;
use sqlx::Transaction;

use crate::core::error::StoreError;
use crate::core::key::RecordKey;
use crate::face::endpoint::AtomicNeed;
use crate::face::offer::{PendingTx, TxOffer};
use crate::http::rejection::Rejection;
use crate::store::atomic::{AtomicDatabase, AtomicStore};
use crate::store::{BoxFuture, Completion, Fence, LeaseToken};

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
/// - A 5xx response, an error, a panic or a dropped request rolls the transaction back and
///   releases the key, so the retry runs against a database the failed attempt never touched.
/// - If the process dies before the commit, none of the attempt's writes are left: on PostgreSQL
///   with one commit ([`Commits`](crate::Commits), the default) the claim was in the transaction
///   and the retry runs at once; otherwise only the claim is left, which a retry takes over once
///   the lease lapses. The operation's database effects happen exactly once.
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
pub struct Tx<DB: AtomicDatabase> {
    store: Arc<dyn AtomicStore<DB>>,
    tx: Option<Lent<DB>>,
    offer: TxOffer,
}

/// The transaction a [`Tx`] lends the handler.
enum Lent<DB: AtomicDatabase> {
    /// Begun at the handler's first [`Tx::conn`] (the claim committed before).
    Begun(Transaction<'static, DB>),
    /// Begun by the engine with the record's claim in it (one commit on PostgreSQL).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Claimed(Box<dyn ClaimedConn<DB>>),
}

impl<DB: AtomicDatabase> Lent<DB> {
    fn conn(&mut self) -> &mut DB::Connection {
        match self {
            Self::Begun(tx) => tx,
            Self::Claimed(claimed) => claimed.conn(),
        }
    }
}

/// A transaction the engine began with the record's claim in it.
trait ClaimedConn<DB: AtomicDatabase>: Send {
    fn conn(&mut self) -> &mut DB::Connection;

    /// Completes the record and commits: `Fence::Held` when both happened.
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
}

#[cfg(feature = "postgres")]
struct PgClaimed {
    tx: crate::store::ClaimedTx,
    store: Arc<crate::store::PostgresStore>,
}

#[cfg(feature = "postgres")]
impl ClaimedConn<sqlx::Postgres> for PgClaimed {
    fn conn(&mut self) -> &mut sqlx::PgConnection {
        self.tx.conn()
    }

    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(async move {
            let PgClaimed { tx, store } = *self;
            tx.complete_and_commit(&store, key, token, completion).await
        })
    }
}

/// Parks the transaction holding a claim in `offer`, for the handler's [`Tx`] to take at its
/// first [`Tx::conn`] and for the engine to commit when the handler returns.
#[cfg(feature = "postgres")]
pub(crate) fn park(
    offer: &TxOffer,
    tx: crate::store::ClaimedTx,
    store: Arc<crate::store::PostgresStore>,
) {
    offer.hand_back(Box::new(Begun::<sqlx::Postgres> {
        tx: Lent::Claimed(Box::new(PgClaimed {
            tx,
            store: store.clone(),
        })),
        store,
    }));
}

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
        if self.tx.is_none() {
            let lent = match self.offer.returned() {
                // The engine began the transaction with the claim in it.
                Some(parked) => match parked.into_any().downcast::<Begun<DB>>() {
                    Ok(begun) => begun.tx,
                    Err(_) => {
                        return Err(sqlx::Error::Configuration(
                            "the idempotency engine began a transaction on another database".into(),
                        ));
                    }
                },
                None => Lent::Begun(self.store.pool().begin_with(DB::BEGIN).await?),
            };
            self.tx = Some(lent);
        }
        Ok(self.tx.as_mut().expect("begun above").conn())
    }

    /// A key for a call to another service that is stable across every retry of this request,
    /// including a retry that takes over after a crash: pass it as that service's idempotency
    /// key so the downstream effect happens once too. `purpose` tells apart several calls made
    /// by one request (`"charge"`, `"refund"`).
    ///
    /// The key is a UUID (version 8) derived from the idempotency record, never from the
    /// client's key in clear. Without an idempotency key it is random.
    pub fn downstream_key(&self, purpose: &str) -> String {
        self.offer.downstream_key(purpose)
    }
}

impl<DB: AtomicDatabase> Tx<DB> {
    /// The transaction of a programmatic operation in atomic mode, handed back through `offer`
    /// when dropped; `None` when the store lends no transactions on `DB`.
    pub(crate) fn offered(offer: &TxOffer) -> Option<Self> {
        let store = offer.capabilities().atomic::<DB>().cloned()?;
        offer.mark_taken();
        Some(Self {
            store,
            tx: None,
            offer: offer.clone(),
        })
    }
}

impl<DB: AtomicDatabase> Drop for Tx<DB> {
    fn drop(&mut self) {
        // Hand the transaction back to the engine, which commits or rolls it back.
        if let Some(tx) = self.tx.take() {
            self.offer.hand_back(Box::new(Begun {
                tx,
                store: self.store.clone(),
            }));
        }
    }
}

impl<DB: AtomicDatabase> fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("database", &<DB as AtomicDatabase>::NAME)
            .field("begun", &self.tx.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync, DB: AtomicDatabase> FromRequestParts<S> for Tx<DB> {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Rejection> {
        let offer = TxOffer::take(parts)?;
        let store = offer.capabilities().atomic::<DB>().cloned().ok_or(
            Rejection::Misconfigured {
                reason: "the idempotency store offers no transactions on this handler's database",
            },
        )?;
        Ok(Self {
            store,
            tx: None,
            offer,
        })
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
            Self::None => None,
        }
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl<S: Send + Sync> FromRequestParts<S> for AnyTx {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Rejection> {
        let Some(offer) = parts.extensions.get::<TxOffer>() else {
            return Ok(Self::None);
        };
        if offer.capabilities().atomic::<sqlx::Postgres>().is_some() {
            Tx::from_request_parts(parts, state)
                .await
                .map(Self::Postgres)
        } else if offer.capabilities().atomic::<sqlx::Sqlite>().is_some() {
            Tx::from_request_parts(parts, state).await.map(Self::Sqlite)
        } else {
            Ok(Self::None)
        }
    }
}

/// A handler parameter that puts the handler in atomic mode ([`Tx`] or `AnyTx`): what it needs
/// from the store, checked by [`Builder::build`](crate::Builder::build).
pub trait AtomicParam {
    /// The transactions the parameter needs.
    fn need() -> AtomicNeed;
}

impl<DB: AtomicDatabase> AtomicParam for Tx<DB> {
    fn need() -> AtomicNeed {
        AtomicNeed::new(<DB as AtomicDatabase>::NAME, |capabilities| {
            capabilities.atomic::<DB>().is_some()
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

struct Begun<DB: AtomicDatabase> {
    tx: Lent<DB>,
    store: Arc<dyn AtomicStore<DB>>,
}

impl<DB: AtomicDatabase> PendingTx for Begun<DB> {
    fn complete_and_commit<'a>(
        self: Box<Self>,
        key: &'a RecordKey,
        token: LeaseToken,
        completion: Completion<'a>,
    ) -> BoxFuture<'a, Result<Fence, StoreError>> {
        Box::pin(async move {
            let Begun { tx, store } = *self;
            let mut tx = match tx {
                Lent::Begun(tx) => tx,
                Lent::Claimed(claimed) => {
                    return claimed.complete_and_commit(key, token, completion).await;
                }
            };
            match store.complete_in(&mut tx, key, token, completion).await? {
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
            match self.tx {
                Lent::Begun(tx) => tx.commit().await.map_err(StoreError::unavailable),
                // Never parked without a record: dropping it rolls back.
                Lent::Claimed(_) => Err(StoreError::unavailable(std::io::Error::other(
                    "a claim's transaction commits only with its record",
                ))),
            }
        })
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}
