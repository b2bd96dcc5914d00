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
//!
//! All four answer `201 Created` with the row's id and a `Location`, as `app`'s handlers
//! do. Only `--store postgres` serves them (an engine on another store has no transactions to
//! lend the atomic form).

use axum::Json;
use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::{StatusCode, header};
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

/// The table every form writes to: `id`, the order's amount and item count, and its customer.
pub const TABLE: &str = "bench_orders";

const CREATE: &str = "CREATE TABLE IF NOT EXISTS bench_orders (
    id       bigserial PRIMARY KEY,
    amount   bigint    NOT NULL,
    items    integer   NOT NULL,
    customer text      NOT NULL
)";

const INSERT: &str =
    "INSERT INTO bench_orders (amount, items, customer) VALUES ($1, $2, $3) RETURNING id";

/// Creates [`TABLE`] if it is missing.
pub async fn create_table(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query(CREATE).execute(pool).await.map(drop)
}

/// The `INSERT` of one order on `executor`; returns the new row's id.
async fn insert<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    order: &Value,
) -> Result<i64, sqlx::Error> {
    let amount = order.get("amount").and_then(Value::as_i64).unwrap_or(0);
    let items = order
        .get("items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let customer = order
        .get("customer")
        .and_then(Value::as_str)
        .unwrap_or_default();
    sqlx::query_scalar(INSERT)
        .bind(amount)
        .bind(i32::try_from(items).unwrap_or(i32::MAX))
        .bind(customer)
        .fetch_one(executor)
        .await
}

/// `201 Created` for row `id`, or `500` when the `INSERT` failed (idem then releases the key).
fn created(id: Result<i64, sqlx::Error>) -> Response {
    match id {
        Ok(id) => {
            let location = format!("/v1/orders/ord_{id}");
            (
                StatusCode::CREATED,
                [(header::LOCATION, location.clone())],
                Json(json!({ "id": format!("ord_{id}"), "object": "order", "url": location })),
            )
                .into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
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

/// The router state: the engine and the pool the handlers write with.
#[derive(Clone, FromRef)]
pub struct PgState {
    /// The idempotency engine, on a `PostgresStore`.
    pub idempotency: Idempotency,
    /// The pool of the orders table (the store's, as an application sharing it would).
    pub pool: PgPool,
}

/// `POST /pg/bare`, `/pg/plain` and `/pg/atomic` on `engine` and `pool`.
pub fn router(idempotency: Idempotency, pool: PgPool) -> Router {
    Router::new()
        .route(BARE, post(bare))
        .route(PLAIN, post(plain))
        .route(ATOMIC, post(atomic))
        .route(ATOMIC_TWO, post(atomic_two))
        .with_state(PgState { idempotency, pool })
}
