//! Atomic mode for diesel-async (feature `diesel-async`): a handler takes a [`DieselTx`] and
//! writes with diesel's query builder on its `AsyncPgConnection`, in the transaction that
//! carries the record.
//!
//! The store's plain operations stay on its tokio-postgres pool; the transactions it lends come
//! from the application's diesel-async pool ([`TokioPostgresStoreBuilder::diesel`](crate::TokioPostgresStoreBuilder::diesel)),
//! on the same database. The `BEGIN` goes out with the claim (one commit) or ahead of the
//! handler's first statement (two), as with [`TokioPostgresTx`](crate::TokioPostgresTx), and
//! the completion with the `COMMIT`: a fresh request costs its own statements plus two round
//! trips. diesel-async prepares a statement on a connection before it first sends it, so the
//! `COMMIT` goes through the same statement cache, after the completion: a `COMMIT` sent as
//! text beside a completion still being prepared would overtake it. The store's statements
//! are prepared once per connection. diesel's own transaction depth is kept at one while the transaction is lent, so a
//! handler's `conn.transaction(..)` makes a savepoint.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use http::request::Parts;

use crate::db::{Db, poll_once};
use idem_axum::Problem;
use idem_axum::atomic::{AtomicParam, lent};
use idem_core::endpoint::AtomicNeed;
use idem_core::engine::{LendError, Lending};
use idem_core::error::StoreError;
use idem_core::operation::Lent;
use idem_core::store::atomic::{ClaimInTransaction, TransactionClaim};
use idem_core::store::{BoxFuture, Capabilities, ClaimRequest};

mod conn;
mod raw;

use conn::DieselConn;

/// The application's diesel-async pool, as the store lends its connections.
pub type DieselPool = deadpool::managed::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// The database's name in atomic mode's errors and start-up checks.
const DATABASE: &str = "PostgreSQL (diesel-async)";

/// The transactions a store offers on diesel-async.
#[derive(Clone)]
struct Offered {
    db: Arc<Db>,
    pool: DieselPool,
}

/// Offers transactions on `pool`'s connections, and one-commit claims made in them.
pub(crate) fn offer(capabilities: &mut Capabilities, db: &Arc<Db>, pool: &DieselPool) {
    let offered = Offered {
        db: db.clone(),
        pool: pool.clone(),
    };
    capabilities.offer_claim_in_transaction(Arc::new(offered.clone()));
    capabilities.offer_transactions(offered);
}

impl ClaimInTransaction for Offered {
    fn claim_in_transaction<'a>(
        &'a self,
        request: ClaimRequest<'a>,
        lock_wait: Duration,
        statement_timeout: Duration,
    ) -> BoxFuture<'a, Result<TransactionClaim, StoreError>> {
        Box::pin(conn::claim(
            &self.db,
            &self.pool,
            request,
            lock_wait,
            statement_timeout,
        ))
    }
}

/// A diesel-async connection in a transaction that commits together with the idempotency
/// record. Take it as a handler argument (or in `Operation::run_atomic`) and run every write of
/// the operation on [`conn`](Self::conn):
///
/// ```
/// use axum::{Json, http::StatusCode};
/// use diesel::prelude::*;
/// use diesel_async::RunQueryDsl;
/// use idem_runtime::idempotent;
/// use idem_tokio_postgres::diesel::DieselTx;
/// # diesel::table! { charges (id) { id -> BigInt, amount -> BigInt } }
/// # #[derive(serde::Deserialize, Insertable)]
/// # #[diesel(table_name = charges)]
/// # struct NewCharge { amount: i64 }
/// # struct ApiError(diesel::result::Error);
/// # impl From<diesel::result::Error> for ApiError {
/// #     fn from(e: diesel::result::Error) -> Self { Self(e) }
/// # }
/// # impl axum::response::IntoResponse for ApiError {
/// #     fn into_response(self) -> axum::response::Response {
/// #         StatusCode::INTERNAL_SERVER_ERROR.into_response()
/// #     }
/// # }
///
/// #[idempotent(scope = "org")]
/// async fn create_charge(
///     mut tx: DieselTx,
///     Json(req): Json<NewCharge>,
/// ) -> Result<StatusCode, ApiError> {
///     diesel::insert_into(charges::table)
///         .values(&req)
///         .execute(tx.conn().await?)
///         .await?;
///     Ok(StatusCode::CREATED)
/// }
/// ```
///
/// A 2xx, 3xx or 4xx response is stored in the transaction, which then commits; a 5xx, an
/// error or a panic rolls it back and releases the key. Do not commit or roll back the
/// transaction yourself; `conn.transaction(..)` inside it makes a savepoint.
pub struct DieselTx {
    lending: Lending,
    offered: Offered,
    conn: Option<Box<DieselConn>>,
}

impl DieselTx {
    /// The transaction's connection. With one commit the transaction began with the claim;
    /// otherwise it begins here, its `BEGIN` queued on the connection ahead of the handler's
    /// first statement, so the two share one round trip.
    pub async fn conn(&mut self) -> Result<&mut AsyncPgConnection, diesel::result::Error> {
        if self.conn.is_none() {
            self.conn = Some(self.open().await?);
        }
        Ok(self.conn.as_mut().expect("opened").conn())
    }

    async fn open(&mut self) -> Result<Box<DieselConn>, diesel::result::Error> {
        if let Some(parked) = self.lending.take_parked()
            && let Ok(conn) = parked.into_any().downcast::<DieselConn>()
        {
            return Ok(conn);
        }
        self.lending.open();
        let pooled = self.offered.pool.get().await.map_err(|error| {
            diesel::result::Error::DatabaseError(
                diesel::result::DatabaseErrorKind::UnableToSendCommand,
                Box::new(error.to_string()),
            )
        })?;
        let ms = self
            .lending
            .statement_timeout()
            .as_millis()
            .clamp(1, i32::MAX as u128);
        {
            let mut c: &AsyncPgConnection = &pooled;
            poll_once(c.batch_execute(&format!(
                "BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}"
            )));
        }
        Ok(Box::new(DieselConn::new(
            pooled,
            self.offered.db.clone(),
            None,
        )?))
    }

    /// A key for a call to another service that is stable across every retry of this request:
    /// pass it as that service's idempotency key.
    pub fn downstream_key(&self, purpose: &str) -> String {
        self.lending.downstream_key(purpose)
    }
}

impl Drop for DieselTx {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.lending.hand_back(conn);
        }
    }
}

impl fmt::Debug for DieselTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DieselTx")
            .field("begun", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// The programmatic API's atomic mode hands out the same `DieselTx`.
impl Lent for DieselTx {
    const DATABASE: &'static str = DATABASE;

    fn lent(lending: &Lending) -> Result<Self, LendError> {
        Ok(Self {
            offered: lending.lend::<Offered>()?,
            lending: lending.clone(),
            conn: None,
        })
    }
}

impl AtomicParam for DieselTx {
    fn need() -> AtomicNeed {
        AtomicNeed::new(DATABASE, |capabilities| {
            capabilities.transactions::<Offered>().is_some()
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for DieselTx {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        lent(&parts.extensions).map_err(Problem)
    }
}
