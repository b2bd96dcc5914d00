//! [`TokioPostgresTx`]: the handle a handler in atomic mode writes through, with tokio-postgres's query
//! methods and savepoints for nesting (tokio-postgres's own `Transaction` cannot be built around
//! a `BEGIN` someone else sent, and its `GenericClient` is sealed).

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::FromRequestParts;
use deadpool_postgres::PoolError;
use http::request::Parts;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use super::conn::LentConn;
use super::{DATABASE, Offered, is_offered};
use crate::db::Db;
use idem_axum::Problem;
use idem_axum::atomic::{AtomicParam, lent};
use idem_core::endpoint::AtomicNeed;
use idem_core::engine::{LendError, Lending};
use idem_core::operation::Lent;

/// A transaction on the store's PostgreSQL database that commits together with the
/// idempotency record: take it as a handler argument (or in `Operation::run_atomic`) and send
/// every write of the operation through it.
///
/// ```
/// use axum::{Json, http::StatusCode};
/// use idem_runtime::idempotent;
/// use idem_tokio_postgres::{TokioPostgresTx, TxError};
/// # #[derive(serde::Deserialize)]
/// # struct NewCharge { amount: i64 }
/// # struct ApiError(TxError);
/// # impl From<TxError> for ApiError { fn from(e: TxError) -> Self { Self(e) } }
/// # impl axum::response::IntoResponse for ApiError {
/// #     fn into_response(self) -> axum::response::Response {
/// #         StatusCode::INTERNAL_SERVER_ERROR.into_response()
/// #     }
/// # }
///
/// #[idempotent(scope = "org")]
/// async fn create_charge(
///     mut tx: TokioPostgresTx,
///     Json(req): Json<NewCharge>,
/// ) -> Result<StatusCode, ApiError> {
///     tx.execute("INSERT INTO charges (amount) VALUES ($1)", &[&req.amount])
///         .await?;
///     Ok(StatusCode::CREATED)
/// }
/// ```
///
/// - A 2xx, 3xx or 4xx response is stored in the transaction, which then commits; a 5xx, an
///   error or a panic rolls it back and releases the key.
/// - With one commit (the default) the transaction began with the claim, the two sent together
///   before the handler ran; with `commits = "two"` (and in `run_atomic`) it begins at the
///   first statement, the `BEGIN` sent together with it. Either way the completion goes out
///   with the `COMMIT`: a fresh request costs its own statements and two round trips.
/// - Every statement is prepared once per connection (the pool's statement cache) and bound
///   in binary.
/// - [`savepoint`](Self::savepoint) nests: a savepoint rolls back alone.
///
/// The application's tables must live in the store's database. A `TokioPostgresTx` must not outlive its
/// handler: writes made through it after the handler returned are rolled back.
pub struct TokioPostgresTx {
    lending: Lending,
    db: Arc<Db>,
    conn: Option<Box<LentConn>>,
    /// Savepoints made so far, for their names.
    savepoints: u32,
}

/// Why a statement sent through a [`TokioPostgresTx`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxError {
    /// PostgreSQL refused the statement, or the connection failed.
    #[error(transparent)]
    Postgres(#[from] tokio_postgres::Error),
    /// No connection could be had from the store's pool for the transaction.
    #[error(transparent)]
    Pool(#[from] PoolError),
}

impl TxError {
    /// PostgreSQL's SQLSTATE, when the server refused the statement.
    pub fn code(&self) -> Option<&SqlState> {
        match self {
            Self::Postgres(error) => error.code(),
            Self::Pool(PoolError::Backend(error)) => error.code(),
            Self::Pool(_) => None,
        }
    }
}

impl TokioPostgresTx {
    /// The connection in the transaction: the one the engine began with the claim, or a pooled
    /// one whose `BEGIN` is returned to be sent with the first statement.
    async fn open(&mut self) -> Result<Option<String>, TxError> {
        if self.conn.is_some() {
            return Ok(None);
        }
        if let Some(parked) = self.lending.take_parked() {
            // Parked by this store's claim: a `LentConn`. Anything else rolls back on drop.
            if let Ok(conn) = parked.into_any().downcast::<LentConn>() {
                self.conn = Some(conn);
                return Ok(None);
            }
        }
        self.lending.open();
        let client = self.db.pool.get().await?;
        self.conn = Some(Box::new(LentConn::new(client, self.db.clone(), None)));
        let ms = self
            .lending
            .statement_timeout()
            .as_millis()
            .clamp(1, i32::MAX as u128);
        Ok(Some(format!(
            "BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms}"
        )))
    }

    fn conn(&self) -> &LentConn {
        self.conn.as_deref().expect("opened")
    }

    /// Runs `statement` (its preparation, on the connection's first use of it, then its
    /// execution) on the transaction's connection, with the `BEGIN` in front of it when the
    /// transaction has not begun: with a prepared statement, the two share one round trip, and
    /// a statement prepared now is prepared inside the transaction and its timeouts.
    async fn run<T>(
        &self,
        begin: Option<String>,
        statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, TxError> {
        let conn = self.conn();
        // Dropped before the answer, the connection is closed rather than reused.
        conn.busy.store(true, Ordering::Relaxed);
        let done = match begin {
            None => statement.await,
            Some(begin) => {
                let (begun, done) = tokio::join!(conn.client().batch_execute(&begin), statement);
                begun.and(done)
            }
        };
        conn.busy.store(false, Ordering::Relaxed);
        Ok(done?)
    }

    /// Like tokio-postgres's `Client::query`: the rows `sql` returns.
    pub async fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, TxError> {
        let begin = self.open().await?;
        let client = self.conn().client();
        let statement = async move {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, params).await
        };
        self.run(begin, statement).await
    }

    /// Like tokio-postgres's `Client::query_one`: the one row `sql` returns.
    pub async fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, TxError> {
        let begin = self.open().await?;
        let client = self.conn().client();
        let statement = async move {
            let statement = client.prepare_cached(sql).await?;
            client.query_one(&statement, params).await
        };
        self.run(begin, statement).await
    }

    /// Like tokio-postgres's `Client::query_opt`: at most one row.
    pub async fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, TxError> {
        let begin = self.open().await?;
        let client = self.conn().client();
        let statement = async move {
            let statement = client.prepare_cached(sql).await?;
            client.query_opt(&statement, params).await
        };
        self.run(begin, statement).await
    }

    /// Like tokio-postgres's `Client::execute`: the number of rows changed.
    pub async fn execute(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, TxError> {
        let begin = self.open().await?;
        let client = self.conn().client();
        let statement = async move {
            let statement = client.prepare_cached(sql).await?;
            client.execute(&statement, params).await
        };
        self.run(begin, statement).await
    }

    /// Like tokio-postgres's `Client::batch_execute`: statements as text, without parameters
    /// (the simple protocol), for DDL and the like.
    pub async fn batch_execute(&mut self, sql: &str) -> Result<(), TxError> {
        let begin = self.open().await?;
        let client = self.conn().client();
        self.run(begin, client.batch_execute(sql)).await
    }

    /// The transaction's client, beginning the transaction first, for what the methods above
    /// do not offer (`copy_in`, a statement prepared with types). What it sends runs in the
    /// transaction; do not send `COMMIT` or `ROLLBACK` through it.
    pub async fn client(&mut self) -> Result<&Client, TxError> {
        let begin = self.open().await?;
        self.run(begin, async { Ok(()) }).await?;
        Ok(self.conn().client())
    }

    /// A savepoint in the transaction: statements through it (it derefs to this `TokioPostgresTx`) roll back
    /// alone when it is dropped or [rolled back](Savepoint::rollback), and stay when it is
    /// [released](Savepoint::release). Savepoints nest.
    pub async fn savepoint(&mut self) -> Result<Savepoint<'_>, TxError> {
        self.savepoints += 1;
        let name = format!("idem_sp_{}", self.savepoints);
        let begin = self.open().await?;
        let sql = match begin {
            Some(begin) => format!("{begin}; SAVEPOINT {name}"),
            None => format!("SAVEPOINT {name}"),
        };
        let client = self.conn().client();
        self.run(None, client.batch_execute(&sql)).await?;
        Ok(Savepoint {
            tx: self,
            name,
            done: false,
        })
    }

    /// A key for a call to another service that is stable across every retry of this request,
    /// including one that takes over after a crash: pass it as that service's idempotency key.
    /// `purpose` tells apart several calls of one request.
    pub fn downstream_key(&self, purpose: &str) -> String {
        self.lending.downstream_key(purpose)
    }
}

/// A savepoint of a [`TokioPostgresTx`], made by [`TokioPostgresTx::savepoint`]; it derefs to the `TokioPostgresTx`, whose methods
/// then write inside it. Dropped without [`release`](Self::release), it rolls back.
pub struct Savepoint<'a> {
    tx: &'a mut TokioPostgresTx,
    name: String,
    done: bool,
}

impl Savepoint<'_> {
    /// Keeps what was written inside the savepoint, in the transaction.
    pub async fn release(mut self) -> Result<(), TxError> {
        self.done = true;
        let sql = format!("RELEASE SAVEPOINT {}", self.name);
        self.tx.batch_execute(&sql).await
    }

    /// Undoes what was written inside the savepoint; the transaction goes on.
    pub async fn rollback(mut self) -> Result<(), TxError> {
        self.done = true;
        let sql = format!(
            "ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}",
            name = self.name
        );
        self.tx.batch_execute(&sql).await
    }
}

impl Deref for Savepoint<'_> {
    type Target = TokioPostgresTx;
    fn deref(&self) -> &TokioPostgresTx {
        self.tx
    }
}

impl DerefMut for Savepoint<'_> {
    fn deref_mut(&mut self) -> &mut TokioPostgresTx {
        self.tx
    }
}

impl Drop for Savepoint<'_> {
    fn drop(&mut self) {
        if !self.done {
            let name = &self.name;
            let conn = self.tx.conn();
            conn.send_now(&format!(
                "ROLLBACK TO SAVEPOINT {name}; RELEASE SAVEPOINT {name}"
            ));
        }
    }
}

impl Drop for TokioPostgresTx {
    fn drop(&mut self) {
        // Handed back to the engine, which completes the record in it and commits, or rolls
        // it back.
        if let Some(conn) = self.conn.take() {
            self.lending.hand_back(conn);
        }
    }
}

impl fmt::Debug for TokioPostgresTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokioPostgresTx")
            .field("database", &DATABASE)
            .field("begun", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Savepoint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Savepoint")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The programmatic API's atomic mode hands out the same `TokioPostgresTx`.
impl Lent for TokioPostgresTx {
    const DATABASE: &'static str = DATABASE;

    fn lent(lending: &Lending) -> Result<Self, LendError> {
        let Offered(db) = lending.lend::<Offered>()?;
        Ok(Self {
            lending: lending.clone(),
            db,
            conn: None,
            savepoints: 0,
        })
    }
}

impl AtomicParam for TokioPostgresTx {
    fn need() -> AtomicNeed {
        AtomicNeed::new(DATABASE, is_offered)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for TokioPostgresTx {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Problem> {
        lent(&parts.extensions).map_err(Problem)
    }
}
