//! Atomic mode: the handler's database writes and the stored response commit together.
//!
//! An `#[idempotent]` handler that takes a [`Tx`] parameter runs inside a transaction on the
//! engine's SQL store. Its writes go through the transaction; the engine stores the response in
//! the same transaction and commits. A crash at any point leaves either both or neither, so a
//! retry can never repeat a database effect that already happened.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use sqlx::{Pool, Transaction};

use crate::engine::Idempotency;
use crate::error::StoreError;
use crate::key::RecordKey;
use crate::response::StoredResponse;
use crate::store::{BoxFuture, Fence, LeaseToken};

/// A database transaction that commits together with the idempotency record.
///
/// Take it as a handler parameter (the attribute recognises a parameter whose type is `Tx<..>`)
/// and send every write of the operation through [`Tx::conn`]:
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
/// - If the process dies before the commit, nothing of the attempt is left but its claim, which
///   a retry takes over once the lease lapses: the operation's database effects happen exactly
///   once.
/// - Without an idempotency key the handler still runs in a transaction, committed unless the
///   response is a 5xx.
///
/// The transaction begins at the first [`Tx::conn`] call, not before the handler: slow work done
/// before the first query (a call to a payment processor, say) holds no database lock. On
/// SQLite it begins with `BEGIN IMMEDIATE`, taking the single write lock up front, so a handler
/// that reads and then writes cannot fail with `SQLITE_BUSY` halfway; keep slow non-database
/// work before the first query.
///
/// The application's tables must live in the store's database (the engine's `SqliteStore` or
/// `PostgresStore` pool); [`Builder::build`](crate::Builder::build) fails when an endpoint takes
/// a `Tx` for another database than the store's. A `Tx` must not outlive its handler: writes
/// made through it after the handler returned are rolled back.
pub struct Tx<DB: AtomicDatabase> {
    pool: Pool<DB>,
    tx: Option<Transaction<'static, DB>>,
    slot: Slot<DB>,
    seed: [u8; 32],
}

pub(crate) type Slot<DB> = Arc<Mutex<Option<Transaction<'static, DB>>>>;

impl<DB: AtomicDatabase> Tx<DB> {
    pub(crate) fn new(pool: Pool<DB>, seed: [u8; 32]) -> (Self, Slot<DB>) {
        let slot = Slot::default();
        (
            Self {
                pool,
                tx: None,
                slot: slot.clone(),
                seed,
            },
            slot,
        )
    }

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
            self.tx = Some(self.pool.begin_with(DB::BEGIN).await?);
        }
        Ok(self.tx.as_deref_mut().expect("begun above"))
    }

    /// A key for a call to another service that is stable across every retry of this request,
    /// including a retry that takes over after a crash: pass it as that service's idempotency
    /// key so the downstream effect happens once too. `purpose` tells apart several calls made
    /// by one request (`"charge"`, `"refund"`).
    ///
    /// The key is a UUID (version 8) derived from the idempotency record, never from the
    /// client's key in clear. Without an idempotency key it is random.
    pub fn downstream_key(&self, purpose: &str) -> String {
        downstream_key(&self.seed, purpose)
    }
}

pub(crate) fn downstream_key(seed: &[u8; 32], purpose: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"idem.downstream.v1");
    hasher.update(seed);
    hasher.update((purpose.len() as u64).to_be_bytes());
    hasher.update(purpose.as_bytes());
    let mut b: [u8; 16] = hasher.finalize()[..16].try_into().expect("16 of 32 bytes");
    b[6] = (b[6] & 0x0f) | 0x80; // version 8
    b[8] = (b[8] & 0x3f) | 0x80; // RFC 9562 variant
    let hex = crate::key::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The seed of a request's downstream keys: its record key, or random without one.
pub(crate) fn seed_of(key: Option<&RecordKey>) -> [u8; 32] {
    key.map_or_else(
        || std::array::from_fn(|_| fastrand::u8(..)),
        |k| *k.as_bytes(),
    )
}

impl<DB: AtomicDatabase> Drop for Tx<DB> {
    fn drop(&mut self) {
        // Hand the transaction back to the engine, which commits or rolls it back.
        if let Some(tx) = self.tx.take() {
            *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
        }
    }
}

impl<DB: AtomicDatabase> fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tx")
            .field("begun", &self.tx.is_some())
            .finish_non_exhaustive()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A database with an idem store that atomic mode can share a transaction with: `sqlx::Sqlite`
/// (feature `sqlite`) and `sqlx::Postgres` (feature `postgres`).
#[diagnostic::on_unimplemented(
    message = "`Tx<{Self}>` is not supported: atomic mode needs `sqlx::Sqlite` or `sqlx::Postgres`",
    note = "enable the `sqlite` or `postgres` feature of idem-runtime"
)]
pub trait AtomicDatabase: sqlx::Database + sealed::Sealed {
    /// The store's name, as `Endpoint::atomic` reports it.
    #[doc(hidden)]
    const STORE: &'static str;
    /// How a transaction begins.
    #[doc(hidden)]
    const BEGIN: &'static str;
    /// The pool of the engine's store, when it is this database's store.
    #[doc(hidden)]
    fn pool(engine: &Idempotency) -> Option<Pool<Self>>;
    /// The fenced completion, inside `conn`'s transaction.
    #[doc(hidden)]
    fn complete_in<'a>(
        engine: &'a Idempotency,
        conn: &'a mut Self::Connection,
        key: &'a RecordKey,
        token: LeaseToken,
        response: &'a StoredResponse,
        expires_at: crate::clock::Timestamp,
    ) -> BoxFuture<'a, Result<Fence, StoreError>>;
}

#[cfg(feature = "sqlite")]
mod sqlite_impl {
    use super::*;
    use crate::store::SqliteStore;

    impl sealed::Sealed for sqlx::Sqlite {}

    impl AtomicDatabase for sqlx::Sqlite {
        const STORE: &'static str = "sqlite";
        const BEGIN: &'static str = "BEGIN IMMEDIATE";

        fn pool(engine: &Idempotency) -> Option<Pool<Self>> {
            engine
                .store()
                .as_any()
                .downcast_ref::<SqliteStore>()
                .map(|s| s.pool().clone())
        }

        fn complete_in<'a>(
            _: &'a Idempotency,
            conn: &'a mut Self::Connection,
            key: &'a RecordKey,
            token: LeaseToken,
            response: &'a StoredResponse,
            expires_at: crate::clock::Timestamp,
        ) -> BoxFuture<'a, Result<Fence, StoreError>> {
            Box::pin(crate::store::sqlite::complete_with(
                conn, key, token, response, expires_at,
            ))
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres_impl {
    use super::*;
    use crate::store::PostgresStore;

    impl sealed::Sealed for sqlx::Postgres {}

    impl AtomicDatabase for sqlx::Postgres {
        const STORE: &'static str = "postgres";
        const BEGIN: &'static str = "BEGIN";

        fn pool(engine: &Idempotency) -> Option<Pool<Self>> {
            engine
                .store()
                .as_any()
                .downcast_ref::<PostgresStore>()
                .map(|s| s.pool().clone())
        }

        fn complete_in<'a>(
            engine: &'a Idempotency,
            conn: &'a mut Self::Connection,
            key: &'a RecordKey,
            token: LeaseToken,
            response: &'a StoredResponse,
            expires_at: crate::clock::Timestamp,
        ) -> BoxFuture<'a, Result<Fence, StoreError>> {
            Box::pin(async move {
                let store = engine.store().as_any().downcast_ref::<PostgresStore>();
                let store =
                    store.ok_or(StoreError::Corrupt("the engine's store changed".into()))?;
                store
                    .complete_with(conn, key, token, response, expires_at)
                    .await
            })
        }
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
    /// The engine's store is a `SqliteStore`.
    Sqlite(Tx<sqlx::Sqlite>),
    /// The engine's store is a `PostgresStore`.
    Postgres(Tx<sqlx::Postgres>),
    /// The engine's store has no transactions to share (`MemoryStore`): write as without atomic
    /// mode.
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

/// A handler parameter that puts the handler in atomic mode: [`Tx`] or `AnyTx`. The
/// `#[idempotent]` attribute recognises parameters whose type is named `Tx` or `AnyTx` and hands
/// them over through this trait.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a transaction `#[idempotent]` can provide",
    note = "a parameter named `Tx<..>` or `AnyTx` must be `idem_runtime::Tx<sqlx::Sqlite>`, \
            `idem_runtime::Tx<sqlx::Postgres>` or `idem_runtime::AnyTx`"
)]
pub trait AtomicParam: Sized + Send + 'static {
    /// The store the endpoint needs (`"sqlite"`, `"postgres"`, or `"any"`).
    #[doc(hidden)]
    const STORE: &'static str;

    /// Runs `handler` in atomic mode with a fresh transaction parameter.
    #[doc(hidden)]
    fn run<H, Fut>(
        ready: crate::engine::flow::Ready,
        engine: &Idempotency,
        endpoint: &'static crate::endpoint::Endpoint,
        handler: H,
    ) -> impl std::future::Future<Output = axum::response::Response> + Send
    where
        H: FnOnce(Self) -> Fut + Send,
        Fut: std::future::Future<Output = axum::response::Response> + Send;
}

impl<DB: AtomicDatabase> AtomicParam for Tx<DB> {
    const STORE: &'static str = DB::STORE;

    fn run<H, Fut>(
        ready: crate::engine::flow::Ready,
        engine: &Idempotency,
        endpoint: &'static crate::endpoint::Endpoint,
        handler: H,
    ) -> impl std::future::Future<Output = axum::response::Response> + Send
    where
        H: FnOnce(Self) -> Fut + Send,
        Fut: std::future::Future<Output = axum::response::Response> + Send,
    {
        ready.run_atomic::<DB, H, Fut>(engine, endpoint, handler)
    }
}

#[cfg(all(feature = "sqlite", feature = "postgres"))]
impl AtomicParam for AnyTx {
    const STORE: &'static str = "any";

    async fn run<H, Fut>(
        ready: crate::engine::flow::Ready,
        engine: &Idempotency,
        endpoint: &'static crate::endpoint::Endpoint,
        handler: H,
    ) -> axum::response::Response
    where
        H: FnOnce(Self) -> Fut + Send,
        Fut: std::future::Future<Output = axum::response::Response> + Send,
    {
        let store = engine.store().as_any();
        if store.is::<crate::store::PostgresStore>() {
            let handler = move |tx| handler(AnyTx::Postgres(tx));
            ready
                .run_atomic::<sqlx::Postgres, _, _>(engine, endpoint, handler)
                .await
        } else if store.is::<crate::store::SqliteStore>() {
            let handler = move |tx| handler(AnyTx::Sqlite(tx));
            ready
                .run_atomic::<sqlx::Sqlite, _, _>(engine, endpoint, handler)
                .await
        } else {
            ready.run(engine, endpoint, handler(AnyTx::None)).await
        }
    }
}

/// The store an atomic endpoint's database needs, checked by the builder.
pub(crate) fn store_matches(store: &dyn std::any::Any, database: &str) -> bool {
    match database {
        #[cfg(all(feature = "sqlite", feature = "postgres"))]
        "any" => true,
        #[cfg(feature = "sqlite")]
        "sqlite" => store.is::<crate::store::SqliteStore>(),
        #[cfg(feature = "postgres")]
        "postgres" => store.is::<crate::store::PostgresStore>(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downstream_keys_are_stable_distinct_uuids() {
        let seed = [7u8; 32];
        let a = downstream_key(&seed, "charge");
        assert_eq!(a, downstream_key(&seed, "charge"));
        assert_ne!(a, downstream_key(&seed, "refund"));
        assert_ne!(a, downstream_key(&[8u8; 32], "charge"));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "8", "version 8: {a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "variant: {a}");
    }
}
