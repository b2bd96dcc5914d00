//! Orders on diesel-async, each created once per idempotency key: the handler writes with
//! diesel's query builder on the `AsyncPgConnection` of its `DieselTx`, and the order and the
//! stored response commit together.
//!
//! ```sh
//! cargo run -p idem-tokio-postgres --features diesel-async --example diesel_orders
//! curl -si localhost:3000/orders -H 'Idempotency-Key: k1' -H 'Content-Type: application/json' \
//!   -d '{"item": "book"}'   # again: the same answer, `Idempotent-Replayed: true`, one order
//! ```
//!
//! `DATABASE_URL` names the database (default `postgres://postgres@127.0.0.1:5432/test`); the
//! `orders` table is made in its search path if missing, the records in the `idem` schema.

use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use idem_runtime::{Idempotency, idempotent};
use idem_tokio_postgres::TokioPostgresStore;
use idem_tokio_postgres::deadpool_postgres::{Manager, Pool};
use idem_tokio_postgres::diesel::{DieselPool, DieselTx};
use idem_tokio_postgres::tokio_postgres::NoTls;
use serde::{Deserialize, Serialize};

diesel::table! {
    /// The orders, one per idempotency key.
    orders (id) {
        /// The order's number.
        id -> BigInt,
        /// What was ordered.
        item -> Text,
    }
}

#[derive(Deserialize, Insertable)]
#[diesel(table_name = orders)]
struct NewOrder {
    item: String,
}

#[derive(Serialize, Queryable)]
struct Order {
    id: i64,
    item: String,
}

/// Creates the order, once per key: its row and the response commit together.
#[idempotent(scope = "global")]
async fn create_order(
    mut tx: DieselTx,
    Json(order): Json<NewOrder>,
) -> Result<(StatusCode, Json<Order>), StatusCode> {
    let conn = tx
        .conn()
        .await
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    let created: Order = diesel::insert_into(orders::table)
        .values(&order)
        .returning((orders::id, orders::item))
        .get_result(conn)
        .await
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// The store (its records in `schema`), on a tokio-postgres pool for its own statements and
/// the application's diesel-async pool for the transactions it lends; the orders table; the
/// routes.
async fn app(url: &str, schema: &str) -> Result<(Router, DieselPool), Box<dyn std::error::Error>> {
    let manager = Manager::new(url.parse()?, NoTls);
    let pool = Pool::builder(manager).max_size(4).build()?;
    let mut config = ManagerConfig::default();
    // No check query before each use: one round trip less per request.
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    let diesel = DieselPool::builder(manager).max_size(8).build()?;
    let store = TokioPostgresStore::builder(pool)
        .schema(schema)
        .diesel(diesel.clone())
        .build()
        .await?;
    let mut conn = diesel.get().await?;
    conn.batch_execute(
        "CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, item text NOT NULL)",
    )
    .await?;
    let idempotency = Idempotency::builder().store(store).build()?;
    let router = Router::new()
        .route("/orders", post(create_order))
        .with_state(idempotency);
    Ok((router, diesel))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let (router, _) = app(&url, "idem").await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, router).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    /// In a schema of its own, on the search path of every connection: two requests with one
    /// key make one order, and the second is the first's answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_order_is_created_once_per_key() {
        let base = std::env::var("DATABASE_URL")
            .ok()
            .filter(|u| u.starts_with("postgres"))
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let schema = format!("itp_example_{}", std::process::id());
        let (admin, connection) = idem_tokio_postgres::tokio_postgres::connect(&base, NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let create = format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}");
        admin.batch_execute(&create).await.unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        let outcome = tokio::spawn({
            let (url, schema) = (url.clone(), schema.clone());
            async move {
                let (router, diesel) = app(&url, &schema).await.unwrap();
                let send = || {
                    let request = Request::post("/orders")
                        .header("idempotency-key", "k1")
                        .header("content-type", "application/json")
                        .body(Body::from(r#"{"item": "book"}"#))
                        .unwrap();
                    router.clone().oneshot(request)
                };
                let first = send().await.unwrap();
                let again = send().await.unwrap();
                assert_eq!(first.status(), StatusCode::CREATED);
                assert_eq!(again.status(), StatusCode::CREATED);
                assert!(again.headers().contains_key("idempotent-replayed"));
                let mut conn = diesel.get().await.unwrap();
                let count: i64 = orders::table.count().get_result(&mut conn).await.unwrap();
                assert_eq!(count, 1);
            }
        })
        .await;
        let drop = format!("DROP SCHEMA {schema} CASCADE");
        admin.batch_execute(&drop).await.unwrap();
        outcome.unwrap();
    }
}
