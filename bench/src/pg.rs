//! The handler users compare against on PostgreSQL: one that writes. The same order is `INSERT`ed
//! into one table in four forms:
//!
//! - `POST /pg/bare`: one autocommit `INSERT` on the pool, no idempotency (one round trip, one
//!   commit).
//! - `POST /pg/plain`: the same `INSERT`, autocommit on the pool, under `#[idempotent]` (plain
//!   mode: the claim and the completion are statements of their own).
//! - `POST /pg/atomic`: the same `INSERT` through a [`Tx`], so the handler's write and the
//!   record's completion commit together (atomic mode, one commit: the claim rides in the
//!   handler's transaction).
//! - `POST /pg/atomic-two`: the same in atomic mode with `commits = "two"` (the claim commits
//!   on its own first).
//! - `POST /pg/hand`: what an expert writes without a library for the same effect, the baseline
//!   idem's atomic mode is measured against: in one transaction, `INSERT` the key into
//!   [`KEYS`] `ON CONFLICT DO NOTHING` (a duplicate waits for the first's transaction; when
//!   the key was there, the stored response is read and returned), the order's `INSERT`, and the
//!   response stored with an `UPDATE`. No fingerprint, no lease, no expiry, no scope.
//!
//! All five answer `201 Created` with the row's id and a `Location`, as `app`'s handlers
//! do. Only `--store postgres` serves them (an engine on another store has no transactions to
//! lend the atomic form).

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use idem_runtime::{Idempotency, Tx, idempotent};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Route of the bare one-`INSERT` handler.
pub const BARE: &str = "/pg/bare";
/// Route of the same handler under `#[idempotent]`, plain mode.
pub const PLAIN: &str = "/pg/plain";
/// Route of the same handler under `#[idempotent]`, atomic mode (`Tx<Postgres>`).
pub const ATOMIC: &str = "/pg/atomic";
/// Route of the same handler in atomic mode with two commits (`commits = "two"`).
pub const ATOMIC_TWO: &str = "/pg/atomic-two";

/// Route of the hand-written exactly-once handler, the baseline beside bare.
pub const HAND: &str = "/pg/hand";

/// The hand-written handler's keys and stored responses.
pub const KEYS: &str = "bench_keys";

/// The table every form writes to: `id`, the order's amount and item count, and its customer.
pub const TABLE: &str = "bench_orders";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS bench_orders (
    id       bigserial PRIMARY KEY,
    amount   bigint    NOT NULL,
    items    integer   NOT NULL,
    customer text      NOT NULL
)";

const CREATE_KEYS: &str = "CREATE TABLE IF NOT EXISTS bench_keys (
    key      text  PRIMARY KEY,
    response bytea
)";

pub(crate) const INSERT: &str =
    "INSERT INTO bench_orders (amount, items, customer) VALUES ($1, $2, $3) RETURNING id";

/// Creates [`TABLE`] and [`KEYS`] if they are missing.
pub async fn create_table(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query(CREATE).execute(pool).await?;
    sqlx::query(CREATE_KEYS).execute(pool).await.map(drop)
}

/// The columns of one order: its amount, its number of items and its customer, as every
/// driver's handler binds them.
pub(crate) fn fields(order: &Value) -> (i64, i32, &str) {
    let amount = order.get("amount").and_then(Value::as_i64).unwrap_or(0);
    let items = order
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let customer = order
        .get("customer")
        .and_then(Value::as_str)
        .unwrap_or_default();
    (amount, i32::try_from(items).unwrap_or(i32::MAX), customer)
}

/// The `INSERT` of one order on `executor`; returns the new row's id.
async fn insert<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    order: &Value,
) -> Result<i64, sqlx::Error> {
    let (amount, items, customer) = fields(order);
    sqlx::query_scalar(INSERT)
        .bind(amount)
        .bind(items)
        .bind(customer)
        .fetch_one(executor)
        .await
}

/// `201 Created` for row `id`, or `500` when the `INSERT` failed (idem then releases the key).
pub(crate) fn created<E: std::fmt::Display>(id: Result<i64, E>) -> Response {
    match id {
        Ok(id) => {
            let (location, body) = order_body(id);
            (StatusCode::CREATED, [(header::LOCATION, location)], body).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The `Location` and JSON body of the `201` for order `id`.
pub(crate) fn order_body(id: i64) -> (String, Json<Value>) {
    let location = format!("/v1/orders/ord_{id}");
    let body = json!({ "id": format!("ord_{id}"), "object": "order", "url": location });
    (location, Json(body))
}

/// One autocommit `INSERT`, no idempotency.
pub async fn bare(State(pool): State<PgPool>, Json(order): Json<Value>) -> Response {
    created(insert(&pool, &order).await)
}

/// The same `INSERT`, autocommit, idempotent (plain mode).
#[idempotent(scope = "global")]
pub async fn plain(State(pool): State<PgPool>, Json(order): Json<Value>) -> Response {
    created(insert(&pool, &order).await)
}

/// The same `INSERT` in the request's transaction, idempotent (atomic mode).
#[idempotent(scope = "global")]
pub async fn atomic(mut tx: Tx<sqlx::Postgres>, Json(order): Json<Value>) -> Response {
    let id = match tx.conn().await {
        Ok(conn) => insert(conn, &order).await,
        Err(e) => Err(e),
    };
    created(id)
}

/// The same handler in atomic mode with two commits: the claim commits on its own first.
#[idempotent(scope = "global", commits = "two")]
pub async fn atomic_two(mut tx: Tx<sqlx::Postgres>, Json(order): Json<Value>) -> Response {
    let id = match tx.conn().await {
        Ok(conn) => insert(conn, &order).await,
        Err(e) => Err(e),
    };
    created(id)
}

/// The hand-written exactly-once handler: the key, the order and the stored response in one
/// transaction, five statements (`BEGIN`, the key's `INSERT`, the order's, the `UPDATE`,
/// `COMMIT`); a key already stored answers its stored response after two (`BEGIN`, the
/// `INSERT` that found it, and a `SELECT`, rolled back).
pub async fn hand(State(pool): State<PgPool>, headers: HeaderMap, body: Bytes) -> Response {
    match key_and_order(&headers, &body) {
        Ok((key, order)) => answer(hand_tx(&pool, key, &order).await),
        Err(refused) => refused.into_response(),
    }
}

/// The hand-written handlers' request: its `Idempotency-Key` and its JSON order, or the `400`
/// that refuses it.
pub(crate) fn key_and_order<'h>(
    headers: &'h HeaderMap,
    body: &Bytes,
) -> Result<(&'h str, Value), (StatusCode, &'static str)> {
    let Some(key) = headers.get("idempotency-key").and_then(|k| k.to_str().ok()) else {
        return Err((StatusCode::BAD_REQUEST, "Idempotency-Key required"));
    };
    let Ok(Json(order)) = Json::<Value>::from_bytes(body) else {
        return Err((StatusCode::BAD_REQUEST, "not JSON"));
    };
    Ok((key, order))
}

/// The hand-written handlers' answer: `201` with the new order or the stored response, or
/// `500`.
pub(crate) fn answer<E: std::fmt::Display>(stored: Result<Stored, E>) -> Response {
    match stored {
        Ok(Stored::Fresh(location, response)) => (
            StatusCode::CREATED,
            [
                (header::LOCATION, location),
                (header::CONTENT_TYPE, "application/json".to_owned()),
            ],
            response,
        )
            .into_response(),
        Ok(Stored::Replayed(response)) => (
            StatusCode::CREATED,
            [(header::CONTENT_TYPE, "application/json")],
            response,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The `Location` of order `id` and the response the hand-written handlers store for it.
pub(crate) fn stored_response(id: i64) -> (String, Vec<u8>) {
    let (location, Json(body)) = order_body(id);
    (location, serde_json::to_vec(&body).unwrap_or_default())
}

/// What the hand-written handler answers: a new order, or the response stored for the key.
pub(crate) enum Stored {
    Fresh(String, Vec<u8>),
    Replayed(Vec<u8>),
}

async fn hand_tx(pool: &PgPool, key: &str, order: &Value) -> Result<Stored, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let fresh: Option<i32> = sqlx::query_scalar(
        "INSERT INTO bench_keys (key) VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1",
    )
    .bind(key)
    .fetch_optional(&mut *tx)
    .await?;
    if fresh.is_none() {
        let response: Option<Vec<u8>> =
            sqlx::query_scalar("SELECT response FROM bench_keys WHERE key = $1")
                .bind(key)
                .fetch_one(&mut *tx)
                .await?;
        return Ok(Stored::Replayed(response.unwrap_or_default()));
    }
    let id = insert(&mut *tx, order).await?;
    let (location, response) = stored_response(id);
    sqlx::query("UPDATE bench_keys SET response = $2 WHERE key = $1")
        .bind(key)
        .bind(&response)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Stored::Fresh(location, response))
}

/// The router state: the engine and the pool the handlers write with.
#[derive(Clone, FromRef)]
pub struct PgState {
    /// The idempotency engine, on a `PostgresStore`.
    pub idempotency: Idempotency,
    /// The pool of the orders table (the store's, as an application sharing it would).
    pub pool: PgPool,
}

/// The `#[idempotent]` handlers [`router`] routes, for `Builder::serves`: they need the
/// PostgreSQL store's transactions.
pub fn idempotent() -> impl idem_runtime::Serves {
    (plain, atomic, atomic_two)
}

/// `POST /pg/bare`, `/pg/plain`, `/pg/atomic`, `/pg/atomic-two` and `/pg/hand` on `engine`
/// and `pool`.
pub fn router(idempotency: Idempotency, pool: PgPool) -> Router {
    Router::new()
        .route(BARE, post(bare))
        .route(PLAIN, post(plain))
        .route(ATOMIC, post(atomic))
        .route(ATOMIC_TWO, post(atomic_two))
        .route(HAND, post(hand))
        .with_state(PgState { idempotency, pool })
}
