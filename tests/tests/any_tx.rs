//! `AnyTx`: one handler for every store. On SQLite, PostgreSQL and MySQL it holds the transaction lent
//! to the request, whose downstream keys are stable across retries of one key and differ
//! between keys; on a store that lends none (memory) it is `AnyTx::None`, with no downstream key.

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::Query;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem_runtime::store::{MemoryStore, Store};
use idem_runtime::{AnyTx, Idempotency, idempotent};
use idem_tests::TestStore;
use serde::Deserialize;
use serde_json::{Value, json};
use tower::ServiceExt;

#[derive(Deserialize)]
struct Fail {
    fail: Option<bool>,
}

/// Answers the downstream key of its transaction (`null` without one); `?fail=true` answers 500,
/// which releases the key.
#[idempotent(scope = "global")]
async fn book(tx: AnyTx, Query(q): Query<Fail>) -> (StatusCode, Json<Value>) {
    let held = match &tx {
        AnyTx::Sqlite(_) => "sqlite",
        AnyTx::Postgres(_) => "postgres",
        AnyTx::MySql(_) => "mysql",
        _ => "none",
    };
    let status = if q.fail == Some(true) {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::CREATED
    };
    let body = json!({ "held": held, "downstream": tx.downstream_key("carrier") });
    (status, Json(body))
}

fn router(store: impl Store) -> Router {
    let idempotency = Idempotency::builder().store(store).build().unwrap();
    Router::new()
        .route("/bookings", post(book))
        .with_state(idempotency)
}

async fn send(router: &Router, key: &str, query: &str) -> (StatusCode, Value) {
    let request = Request::post(format!("/bookings{query}"))
        .header("idempotency-key", key)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

/// On a store that lends transactions: the failed first try, its retry and a later replay all
/// see one downstream key; another idempotency key gets another.
async fn lends<S: TestStore>(store: S, held: &str) {
    let router = router(store.clone());
    let (status, failed) = send(&router, "k", "?fail=true").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(failed["held"], held);
    let key = failed["downstream"]
        .as_str()
        .expect("a downstream key")
        .to_owned();
    assert_eq!(key.len(), 36, "a UUID: {key}");

    let (status, retry) = send(&router, "k", "").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(retry["downstream"], key.as_str(), "stable across retries");
    let (_, other) = send(&router, "k2", "").await;
    assert_eq!(other["held"], held);
    assert_ne!(
        other["downstream"],
        key.as_str(),
        "another key, another downstream key"
    );
    store.discard().await;
}

#[tokio::test]
async fn on_sqlite_any_tx_holds_the_lent_transaction() {
    lends(idem_tests::sqlite_store().await, "sqlite").await;
}

#[tokio::test]
async fn on_postgres_any_tx_holds_the_lent_transaction() {
    lends(idem_tests::postgres_store().await, "postgres").await;
}

#[tokio::test]
async fn on_mysql_any_tx_holds_the_lent_transaction() {
    lends(idem_tests::mysql::mysql_store().await, "mysql").await;
}

#[tokio::test]
async fn on_a_store_without_transactions_any_tx_is_none() {
    let router = router(MemoryStore::new());
    let (status, body) = send(&router, "k", "").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body, json!({ "held": "none", "downstream": null }));
}
