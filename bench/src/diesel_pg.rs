//! The one-`INSERT` handler of [`crate::pg`] on diesel-async, with its deadpool pool of
//! `AsyncPgConnection`s (`RecyclingMethod::Fast`: no check query per use): the same order into
//! the same table with diesel's query builder, the same `201`, in four forms beside sqlx's.
//!
//! - `POST /diesel/bare`: `insert_into(..).values(..).returning(id)` on a pooled connection,
//!   no idempotency (diesel prepares the statement once per connection).
//! - `POST /diesel/hand`: what an expert writes on diesel-async for the same effect as
//!   [`crate::pg::hand`]: `conn.transaction(..)` (its `BEGIN`), the key's
//!   `INSERT .. ON CONFLICT DO NOTHING`, the order's `INSERT`, the response stored with an
//!   `UPDATE`, then its `COMMIT`, each awaited before the next.
//! - `POST /diesel/plain`: the bare handler under `#[idempotent]` (plain mode, the store's
//!   statements on its tokio-postgres pool).
//! - `POST /diesel/atomic`: the `INSERT` on the connection of a [`DieselTx`] (atomic mode, one
//!   commit).
//!
//! The engine of these routes is an engine of its own, on a `TokioPostgresStore` lending
//! transactions from the diesel pool, in the same database and schema as the sqlx store's.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use diesel::prelude::*;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use idem_runtime::{Idempotency, idempotent};
use idem_tokio_postgres::TokioPostgresStoreBuilder;
use idem_tokio_postgres::diesel::{DieselPool, DieselTx};
use serde_json::Value;

use crate::pg::{Stored, answer, created, fields, key_and_order, stored_response};

/// Route of the bare one-`INSERT` handler on diesel-async.
pub const BARE: &str = "/diesel/bare";
/// Route of the hand-written exactly-once handler on diesel-async.
pub const HAND: &str = "/diesel/hand";
/// Route of the bare handler under `#[idempotent]`, plain mode.
pub const PLAIN: &str = "/diesel/plain";
/// Route of the same `INSERT` in atomic mode, on a `DieselTx`'s connection.
pub const ATOMIC: &str = "/diesel/atomic";

diesel::table! {
    /// [`crate::pg::TABLE`].
    bench_orders (id) {
        /// The order's number.
        id -> BigInt,
        /// Its amount.
        amount -> BigInt,
        /// How many items it has.
        items -> Integer,
        /// Whose it is.
        customer -> Text,
    }
}

diesel::table! {
    /// [`crate::pg::KEYS`].
    bench_keys (key) {
        /// The idempotency key.
        key -> Text,
        /// The response stored for it.
        response -> Nullable<Binary>,
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A diesel-async pool of up to `max` connections to `url`, handed out without a check query.
pub fn pool(url: &str, max: usize) -> Result<DieselPool, String> {
    let mut config = ManagerConfig::default();
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    DieselPool::builder(manager)
        .max_size(max)
        .build()
        .map_err(|e| e.to_string())
}

/// The order's `INSERT` on `conn`; the new row's id.
async fn insert(conn: &mut AsyncPgConnection, order: &Value) -> QueryResult<i64> {
    let (amount, items, customer) = fields(order);
    diesel::insert_into(bench_orders::table)
        .values((
            bench_orders::amount.eq(amount),
            bench_orders::items.eq(items),
            bench_orders::customer.eq(customer),
        ))
        .returning(bench_orders::id)
        .get_result(conn)
        .await
}

/// The `INSERT` on a connection of `pool`.
async fn insert_pooled(pool: &DieselPool, order: &Value) -> Result<i64, Error> {
    let mut conn = pool.get().await?;
    Ok(insert(&mut conn, order).await?)
}

/// One autocommit `INSERT`, no idempotency.
pub async fn bare(State(pool): State<DieselPool>, Json(order): Json<Value>) -> Response {
    created(insert_pooled(&pool, &order).await)
}

/// The same `INSERT`, autocommit, idempotent (plain mode).
#[idempotent(scope = "global")]
pub async fn plain(State(pool): State<DieselPool>, Json(order): Json<Value>) -> Response {
    created(insert_pooled(&pool, &order).await)
}

/// The same `INSERT` in the request's transaction, idempotent (atomic mode, one commit).
#[idempotent(scope = "global")]
pub async fn atomic(mut tx: DieselTx, Json(order): Json<Value>) -> Response {
    let id = match tx.conn().await {
        Ok(conn) => insert(conn, &order).await,
        Err(e) => Err(e),
    };
    created(id)
}

/// The hand-written exactly-once handler on diesel-async: in `conn.transaction(..)`, the key's
/// `INSERT`, the order's and the `UPDATE`, awaited one by one between its `BEGIN` and its
/// `COMMIT`; a key already stored answers its stored response.
pub async fn hand(State(pool): State<DieselPool>, headers: HeaderMap, body: Bytes) -> Response {
    match key_and_order(&headers, &body) {
        Ok((key, order)) => answer(hand_tx(&pool, key, &order).await),
        Err(refused) => refused.into_response(),
    }
}

async fn hand_tx(pool: &DieselPool, key: &str, order: &Value) -> Result<Stored, Error> {
    let mut conn = pool.get().await?;
    let stored = conn
        .transaction::<_, diesel::result::Error, _>(async |conn| {
            let fresh: Option<String> = diesel::insert_into(bench_keys::table)
                .values(bench_keys::key.eq(key))
                .on_conflict_do_nothing()
                .returning(bench_keys::key)
                .get_result(conn)
                .await
                .optional()?;
            if fresh.is_none() {
                let response: Option<Vec<u8>> = bench_keys::table
                    .find(key)
                    .select(bench_keys::response)
                    .first(conn)
                    .await?;
                return Ok(Stored::Replayed(response.unwrap_or_default()));
            }
            let id = insert(conn, order).await?;
            let (location, response) = stored_response(id);
            diesel::update(bench_keys::table.find(key))
                .set(bench_keys::response.eq(&response))
                .execute(conn)
                .await?;
            Ok(Stored::Fresh(location, response))
        })
        .await?;
    Ok(stored)
}

/// The router state: the engine lending diesel transactions, and the diesel pool.
#[derive(Clone, FromRef)]
pub struct DieselState {
    /// The idempotency engine, on a `TokioPostgresStore` lending `DieselTx`s.
    pub idempotency: Idempotency,
    /// The application's diesel-async pool, which the handlers write with.
    pub pool: DieselPool,
}

/// The `#[idempotent]` handlers [`router`] routes, for `Builder::serves`.
pub fn idempotent() -> impl idem_runtime::Serves {
    (plain, atomic)
}

/// An engine on the `TokioPostgresStore` `store` builds (its own statements on its
/// tokio-postgres pool), lending transactions from `diesel`, serving `idempotent`'s handlers.
pub async fn engine(
    store: TokioPostgresStoreBuilder,
    diesel: DieselPool,
) -> Result<Idempotency, String> {
    let store = store
        .diesel(diesel)
        .build()
        .await
        .map_err(|e| e.to_string())?;
    Idempotency::builder()
        .store(store)
        .serves(idempotent())
        .build()
        .map_err(|e| e.to_string())
}

/// `POST /diesel/bare`, `/diesel/hand`, `/diesel/plain` and `/diesel/atomic` on `idempotency`
/// (an engine lending diesel transactions from `pool`) and `pool`.
pub fn router(idempotency: Idempotency, pool: DieselPool) -> Router {
    Router::new()
        .route(BARE, post(bare))
        .route(HAND, post(hand))
        .route(PLAIN, post(plain))
        .route(ATOMIC, post(atomic))
        .with_state(DieselState { idempotency, pool })
}
