//! The one-`INSERT` handler of [`crate::pg`] on tokio-postgres, with a deadpool-postgres pool:
//! the same order into the same table, the same `201`, in four forms beside sqlx's.
//!
//! - `POST /tpg/bare`: the `INSERT`, prepared once per connection (deadpool's statement
//!   cache), on a pooled client, no idempotency.
//! - `POST /tpg/hand`: what an expert writes on this driver for the same effect as
//!   [`crate::pg::hand`]: `BEGIN`, the key's `INSERT .. ON CONFLICT DO NOTHING`, the order's
//!   `INSERT`, the response stored with an `UPDATE`, `COMMIT`, each awaited before the next,
//!   every statement prepared once per connection and bound in binary.
//! - `POST /tpg/plain`: the bare handler under `#[idempotent]` on a `TokioPostgresStore`
//!   (plain mode).
//! - `POST /tpg/atomic`: the `INSERT` through a [`TokioPostgresTx`] (atomic mode, one commit,
//!   pipelined: the claim rides with the `BEGIN`, the completion with the `COMMIT`).
//!
//! The engine of these routes is an engine of its own, on a `TokioPostgresStore` in the same
//! database and schema as the sqlx store's; the handlers use the store's pool, as an
//! application sharing it would.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::{Idempotency, idempotent};
use idem_tokio_postgres::deadpool_postgres::Pool;
use idem_tokio_postgres::{TokioPostgresStore, TokioPostgresTx};
use serde_json::Value;

use crate::pg::{INSERT, Stored, answer, created, fields, key_and_order, stored_response};

/// Route of the bare one-`INSERT` handler on tokio-postgres.
pub const BARE: &str = "/tpg/bare";
/// Route of the hand-written exactly-once handler on tokio-postgres.
pub const HAND: &str = "/tpg/hand";
/// Route of the bare handler under `#[idempotent]`, plain mode, on a `TokioPostgresStore`.
pub const PLAIN: &str = "/tpg/plain";
/// Route of the same `INSERT` in atomic mode, through a `TokioPostgresTx`.
pub const ATOMIC: &str = "/tpg/atomic";

const CLAIM: &str = "INSERT INTO bench_keys (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1";
const STORED: &str = "SELECT response FROM bench_keys WHERE key = $1";
const STORE: &str = "UPDATE bench_keys SET response = $2 WHERE key = $1";

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The `INSERT` on a client of `pool`, prepared once per connection; the new row's id.
async fn insert(pool: &Pool, order: &Value) -> Result<i64, Error> {
    let client = pool.get().await?;
    let statement = client.prepare_cached(INSERT).await?;
    let (amount, items, customer) = fields(order);
    let row = client
        .query_one(&statement, &[&amount, &items, &customer])
        .await?;
    Ok(row.try_get(0)?)
}

/// One autocommit `INSERT`, no idempotency.
pub async fn bare(State(pool): State<Pool>, Json(order): Json<Value>) -> Response {
    created(insert(&pool, &order).await)
}

/// The same `INSERT`, autocommit, idempotent (plain mode).
#[idempotent(scope = "global")]
pub async fn plain(State(pool): State<Pool>, Json(order): Json<Value>) -> Response {
    created(insert(&pool, &order).await)
}

/// The same `INSERT` in the request's transaction, idempotent (atomic mode, one commit).
#[idempotent(scope = "global")]
pub async fn atomic(mut tx: TokioPostgresTx, Json(order): Json<Value>) -> Response {
    let (amount, items, customer) = fields(&order);
    let row = tx.query_one(INSERT, &[&amount, &items, &customer]).await;
    created(row.map_err(Error::from).and_then(|row| Ok(row.try_get(0)?)))
}

/// The hand-written exactly-once handler on tokio-postgres: five statements awaited one by one
/// (`BEGIN`, the key's `INSERT`, the order's, the `UPDATE`, `COMMIT`); a key already stored
/// answers its stored response (`BEGIN`, the `INSERT` that found it, a `SELECT`, rolled back).
pub async fn hand(State(pool): State<Pool>, headers: HeaderMap, body: Bytes) -> Response {
    match key_and_order(&headers, &body) {
        Ok((key, order)) => answer(hand_tx(&pool, key, &order).await),
        Err(refused) => refused.into_response(),
    }
}

async fn hand_tx(pool: &Pool, key: &str, order: &Value) -> Result<Stored, Error> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let claim = tx.prepare_cached(CLAIM).await?;
    if tx.query_opt(&claim, &[&key]).await?.is_none() {
        let stored = tx.prepare_cached(STORED).await?;
        let response: Option<Vec<u8>> = tx.query_one(&stored, &[&key]).await?.try_get(0)?;
        // Dropped without a commit: rolled back.
        return Ok(Stored::Replayed(response.unwrap_or_default()));
    }
    let insert = tx.prepare_cached(INSERT).await?;
    let (amount, items, customer) = fields(order);
    let id: i64 = tx
        .query_one(&insert, &[&amount, &items, &customer])
        .await?
        .try_get(0)?;
    let (location, response) = stored_response(id);
    let store = tx.prepare_cached(STORE).await?;
    tx.execute(&store, &[&key, &response]).await?;
    tx.commit().await?;
    Ok(Stored::Fresh(location, response))
}

/// The router state: the engine on the `TokioPostgresStore` and its pool.
#[derive(Clone, FromRef)]
pub struct TpgState {
    /// The idempotency engine, on a `TokioPostgresStore`.
    pub idempotency: Idempotency,
    /// The store's pool, which the handlers write with.
    pub pool: Pool,
}

/// The `#[idempotent]` handlers [`router`] routes, for `Builder::serves`.
pub fn idempotent() -> impl idem_runtime::Serves {
    (plain, atomic)
}

/// An engine on `store` serving `idempotent`'s handlers.
pub fn engine(store: TokioPostgresStore) -> Result<Idempotency, String> {
    Idempotency::builder()
        .store(store)
        .serves(idempotent())
        .build()
        .map_err(|e| e.to_string())
}

/// `POST /tpg/bare`, `/tpg/hand`, `/tpg/plain` and `/tpg/atomic` on `idempotency` (an engine
/// on a `TokioPostgresStore`) and `pool` (its store's).
pub fn router(idempotency: Idempotency, pool: Pool) -> Router {
    Router::new()
        .route(BARE, post(bare))
        .route(HAND, post(hand))
        .route(PLAIN, post(plain))
        .route(ATOMIC, post(atomic))
        .with_state(TpgState { idempotency, pool })
}
