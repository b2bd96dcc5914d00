//! Input that can never succeed is never answered as retryable. A value PostgreSQL refuses (a
//! NUL in text, a number out of its column's range), written in atomic mode, aborts the
//! operation's transaction; the operation answers "invalid", and that answer reaches the caller
//! (HTTP `400` through the attribute, with one commit and with two; the programmatic API's own
//! error), never the engine's "store unavailable, retry". Nothing of it is stored: no row, no
//! record, so a retry runs again and the key stays free for a good request. The gRPC face's
//! case is `grpc/atomic.rs`'s. A scope value PostgreSQL cannot keep is refused before the claim,
//! as no caller (`401`), on every face.
//!
//! ```text
//! cargo test -p idem-tests --test bad_values
//! ```

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::PostgresStore;
use idem_runtime::store::records::RecordFilter;
use idem_runtime::{Idempotency, IdempotencyLayer, OperationError, Outcome, Tx, idempotent};
use idem_tests::{Calls, TestStore};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Postgres};
use tower::ServiceExt;

/// What PostgreSQL refuses to store, as request bodies.
fn bad_bodies() -> [Value; 2] {
    [
        json!({ "name": "a\u{0}b", "quantity": 1 }),
        json!({ "name": "a", "quantity": 1_i64 << 40 }),
    ]
}

/// The application's table, in the store's schema.
#[derive(Clone)]
struct Items(Arc<str>);

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    items: Items,
    runs: Calls,
}

/// Writes `body` as an item in the operation's transaction: `name` is text, `quantity` an
/// `integer` (32 bits).
async fn insert(tx: &mut Tx<Postgres>, items: &Items, body: &Value) -> Result<(), sqlx::Error> {
    let insert = format!("INSERT INTO {} (name, quantity) VALUES ($1, $2)", items.0);
    sqlx::query(AssertSqlSafe(insert))
        .bind(body["name"].as_str().unwrap_or_default())
        .bind(body["quantity"].as_i64().unwrap_or_default())
        .execute(tx.conn().await?)
        .await
        .map(drop)
}

/// Whether PostgreSQL refused a value (SQLSTATE class 22, data exception).
fn is_bad_value(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code.starts_with("22"))
}

/// `201`, or `400 invalid_value` for a value the database refuses.
async fn create(tx: &mut Tx<Postgres>, items: &Items, runs: &Calls, body: &Value) -> Response {
    runs.bump();
    match insert(tx, items, body).await {
        Ok(()) => (StatusCode::CREATED, Json(body.clone())).into_response(),
        Err(e) if is_bad_value(&e) => {
            let problem = json!({ "code": "invalid_value", "detail": e.to_string() });
            (StatusCode::BAD_REQUEST, Json(problem)).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

#[idempotent(scope = "global", commits = "one")]
async fn one_commit(
    State(items): State<Items>,
    State(runs): State<Calls>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    create(&mut tx, &items, &runs, &body).await
}

#[idempotent(scope = "global", commits = "two")]
async fn two_commits(
    State(items): State<Items>,
    State(runs): State<Calls>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    create(&mut tx, &items, &runs, &body).await
}

/// A store in a fresh schema, with the items table beside its records.
async fn harness() -> (PostgresStore, App) {
    let store: PostgresStore = idem_tests::postgres_store().await;
    let items = format!("{}.items", store.schema());
    let ddl = format!("CREATE TABLE {items} (name text NOT NULL, quantity integer NOT NULL)");
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(store.pool())
        .await
        .unwrap();
    let idem = Idempotency::builder().store(store.clone()).build().unwrap();
    let app = App {
        idem,
        items: Items(items.into()),
        runs: Calls::default(),
    };
    (store, app)
}

async fn rows(store: &PostgresStore, items: &Items) -> i64 {
    let count = format!("SELECT count(*) FROM {}", items.0);
    sqlx::query_scalar(AssertSqlSafe(count))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

async fn post_item(router: &Router, path: &str, key: &str, body: &Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_answers_400_and_stores_nothing_with_one_commit_or_two() {
    let (store, app) = harness().await;
    let router = Router::new()
        .route("/one", post(one_commit))
        .route("/two", post(two_commits))
        .with_state(app.clone());
    for path in ["/one", "/two"] {
        for (n, bad) in bad_bodies().iter().enumerate() {
            let key = format!("{path}-{n}");
            let before = app.runs.get();
            for attempt in 1..=2 {
                let (status, body) = post_item(&router, path, &key, bad).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {bad}: {body}");
                assert_eq!(body["code"], "invalid_value", "{path} {bad}");
                // Not replayed: nothing was stored, so the retry ran again.
                assert_eq!(app.runs.get(), before + attempt);
            }
            assert_eq!(rows(&store, &app.items).await, 0, "{path} {bad}");
            // The key is free: a good request under it runs, where a stored answer would
            // make it a reused key (422).
            let good = json!({ "name": "a", "quantity": 1 });
            let (status, _) = post_item(&router, path, &key, &good).await;
            assert_eq!(status, StatusCode::CREATED, "{path} {bad}");
            sqlx::raw_sql(AssertSqlSafe(format!("DELETE FROM {}", app.items.0)))
                .execute(store.pool())
                .await
                .unwrap();
        }
    }
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_programmatic_api_returns_the_operations_error_and_stores_nothing() {
    let (store, app) = harness().await;
    for (n, bad) in bad_bodies().into_iter().enumerate() {
        let key = format!("op-{n}");
        let run = |body: Value| {
            let items = app.items.clone();
            app.idem.operation("bad_values::create").run_atomic(
                key.clone(),
                body,
                move |mut tx: Tx<Postgres>, body: Value| async move {
                    insert(&mut tx, &items, &body).await
                },
            )
        };
        let refused = run(bad.clone()).await;
        assert!(
            matches!(&refused, Err(OperationError::Failed(e)) if is_bad_value(e)),
            "{bad}: {refused:?}"
        );
        assert_eq!(rows(&store, &app.items).await, 0, "{bad}");
        // Nothing stored: a good input under the same key runs, fresh.
        let good = run(json!({ "name": "a", "quantity": 1 })).await;
        assert!(matches!(good, Ok(Outcome::Fresh(()))), "{bad}: {good:?}");
        assert_eq!(rows(&store, &app.items).await, 1, "{bad}");
        sqlx::raw_sql(AssertSqlSafe(format!("DELETE FROM {}", app.items.0)))
            .execute(store.pool())
            .await
            .unwrap();
    }
    store.discard().await;
}

/// A scope value PostgreSQL's `text` cannot keep (a NUL byte, from a resolver that copies what a
/// caller sent) identifies no caller: `401`, not the "store unavailable, retry" its claim would
/// fail with every time; the handler does not run and nothing is stored. Through the layer, whose
/// scopes the engine resolves as the attribute's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_value_with_a_nul_byte_is_401_not_retryable() {
    let (store, app) = harness().await;
    let idem = Idempotency::builder()
        .store(store.clone())
        .scope("tenant", |_| Some("acme\u{0}admin".to_owned()))
        .build()
        .unwrap();
    let runs = app.runs.clone();
    let handler = move || async move {
        runs.bump();
        StatusCode::CREATED
    };
    let router = Router::new()
        .route("/scoped", post(handler))
        .layer(IdempotencyLayer::new(&idem).scope("tenant"));
    for _ in 0..2 {
        let (status, body) = post_item(&router, "/scoped", "k-nul", &json!({})).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["code"], "idempotency_scope_unresolved");
    }
    assert_eq!(app.runs.get(), 0);
    let stored = idem.records().list(&RecordFilter::new(), 10).await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    store.discard().await;
}
