//! Store outages, on PostgreSQL, MySQL and Redis: while the store is unreachable every idempotent
//! request is refused with 503 and the handler does not run (fail closed); when it comes back,
//! service resumes without a restart.
//!
//! The outage is real: the store connects through a TCP proxy on loopback that the test cuts
//! (dropping live connections and refusing new ones) and restores.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::{MySqlStore, PostgresStore, RedisStore, Store};
use idem_runtime::{Idempotency, idempotent};
use idem_tests::TcpProxy;
use idem_tests::proxy::postgres_target;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use tower::ServiceExt;

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    calls: Arc<AtomicUsize>,
}

#[idempotent(scope = "global")]
async fn create(
    State(calls): State<Arc<AtomicUsize>>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    calls.fetch_add(1, Ordering::SeqCst);
    (StatusCode::CREATED, Json(body))
}

async fn send(app: &Router, key: &str) -> (StatusCode, Option<String>, Value) {
    let request = Request::post("/create")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(format!(r#"{{"key":"{key}"}}"#)))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(20), app.clone().oneshot(request))
        .await
        .expect("a request must not hang during an outage")
        .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_fails_closed_and_service_resumes_without_restart() {
    let (target, template) = postgres_target();
    // Migrate a fresh schema directly, then serve through the proxy.
    let direct = idem_tests::postgres_store().await;
    let proxy = TcpProxy::start(target).await;
    let proxied_url = template.replace("{proxy}", &proxy.addr().to_string());
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&proxied_url)
        .unwrap();
    let store = PostgresStore::builder(pool)
        .schema(direct.schema())
        .build()
        .await
        .unwrap();
    outage_scenario(store, &proxy).await;
    idem_tests::db::drop_postgres_store(&direct).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_outage_fails_closed_and_service_resumes_without_restart() {
    let (target, template) = idem_tests::proxy::mysql_target();
    // Migrate a fresh database directly, then serve through the proxy.
    let direct = idem_tests::mysql::mysql_store().await;
    let database = direct.database().expect("a test store names its database");
    let proxy = TcpProxy::start(target).await;
    let proxied_url = template.replace("{proxy}", &proxy.addr().to_string());
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&proxied_url)
        .unwrap();
    let store = MySqlStore::builder(pool)
        .database(database)
        .build()
        .await
        .unwrap();
    outage_scenario(store, &proxy).await;
    idem_tests::TestStore::discard(direct).await;
}

/// Sends `key` until the answer is not the problem `code` (at most 20 tries, 250 ms apart), as
/// a client retries: the last answer.
async fn send_while(app: &Router, key: &str, code: &str) -> (StatusCode, Value) {
    for _ in 0..20 {
        let (status, _, body) = send(app, key).await;
        if body["code"] != code {
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("{key} was still answered `{code}` after 5 s");
}

/// Serves through `store`, whose server is behind `proxy`: one request before the outage, three
/// during it (503, the handler does not run), then service resumes by itself.
async fn outage_scenario(store: impl Store, proxy: &TcpProxy) {
    let calls = Arc::new(AtomicUsize::new(0));
    let idem = Idempotency::builder().store(store).build().unwrap();
    let app = Router::new()
        .route("/create", post(create))
        .with_state(App {
            idem,
            calls: calls.clone(),
        });

    let (status, _, _) = send(&app, "before").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    proxy.set_up(false);
    for key in ["during-1", "during-2", "before"] {
        let (status, retry_after, body) = send(&app, key).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{key}: {body}");
        assert_eq!(body["code"], "idempotency_store_unavailable");
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the handler never runs while the store is down"
    );

    proxy.set_up(true);
    // The store reconnects on its own; allow it a few attempts, bounded.
    let (status, body) = send_while(&app, "after", "idempotency_store_unavailable").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body["key"], "after");
    // A request refused during the outage runs once when retried. Its claim may have reached
    // the store before the cut (its answer lost): then the engine releases it in the
    // background once the store is back, and meanwhile a retry is told 409, as any request in
    // flight, and retries, as a client does.
    let (status, _) = send_while(&app, "during-1", "idempotency_key_in_progress").await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(send(&app, "during-1").await.0, StatusCode::CREATED);
    // And what completed before the outage is still replayed, not run again.
    assert_eq!(send(&app, "before").await.0, StatusCode::CREATED);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "before, after, during-1: once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_closed_and_service_resumes_without_restart() {
    let proxy = TcpProxy::start(idem_tests::redis::redis_addr()).await;
    let store = RedisStore::builder(format!("redis://{}", proxy.addr()))
        .prefix(idem_tests::redis::unique_prefix())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .build()
        .await
        .unwrap();
    outage_scenario(store.clone(), &proxy).await;
    idem_tests::TestStore::discard(store).await;
}
