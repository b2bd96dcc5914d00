//! Metrics and logs: `idempotency_requests_total{endpoint, outcome}` counts every outcome, the
//! same way through the attribute and the layer, each request once (callers that leave too),
//! and the client's key never appears in logs, only its hash.
//!
//! The tests share the process-wide recorder (each counts its own endpoints); one installs the
//! process-wide subscriber.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, KeyMode, idempotent};
use idem_tests::metrics::{recorder as metrics, requests as count};
use serde_json::Value;
use tower::ServiceExt;

#[allow(dead_code)] // only the in-process wrapper is used here
#[path = "hangups/stall.rs"]
mod stall;

use stall::Stall;

async fn plain_create(Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let status = body["status"].as_u64().unwrap_or(201) as u16;
    (StatusCode::from_u16(status).unwrap(), Json(body))
}

#[idempotent(scope = "global", key = "required")]
async fn create(body: Json<Value>) -> (StatusCode, Json<Value>) {
    plain_create(body).await
}

/// `/create` under the attribute, `/layered` under a layer with the same settings.
fn router(idem: Idempotency) -> Router {
    let layered = Router::new()
        .route("/layered", post(plain_create))
        .layer(idem.layer().key(KeyMode::Required));
    Router::new()
        .route("/create", post(create))
        .with_state(idem)
        .merge(layered)
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SECRET: &str = "secret-key-7f3a9c";

fn request(uri: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::post(uri).header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn counts_every_outcome_and_never_logs_the_key() {
    let metrics = metrics();
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let app = router(
        Idempotency::builder()
            .store(MemoryStore::new())
            .build()
            .unwrap(),
    );
    let full = router(
        Idempotency::builder()
            .store(MemoryStore::with_capacity(1))
            .build()
            .unwrap(),
    );
    for uri in ["/create", "/layered"] {
        let send = |key: Option<&str>, body: &str| {
            let app = app.clone();
            let request = request(uri, key, body);
            async move { app.oneshot(request).await.unwrap().status() }
        };
        assert_eq!(send(Some(SECRET), "{}").await, StatusCode::CREATED); // executed
        assert_eq!(send(Some(SECRET), "{}").await, StatusCode::CREATED); // replayed
        assert_eq!(
            send(Some(SECRET), r#"{"a":1}"#).await,
            StatusCode::UNPROCESSABLE_ENTITY
        ); // reused
        assert_eq!(send(None, "{}").await, StatusCode::BAD_REQUEST); // invalid: missing
        assert_eq!(send(Some("bad key"), "{}").await, StatusCode::BAD_REQUEST); // invalid
        let released = send(Some("other-secret-1234"), r#"{"status":500}"#);
        assert_eq!(released.await, StatusCode::INTERNAL_SERVER_ERROR); // released
        // Malformed JSON: the attribute never claims; the layer claims and releases.
        assert_eq!(
            send(Some("malformed-secret-9b2e"), "{").await,
            StatusCode::BAD_REQUEST
        );

        // A store that has no room (a full memory store): `store_full`, not `store_error`,
        // answered 503 with its own code.
        let mut refused = 0;
        for i in 0..=32 {
            let response = full
                .clone()
                .oneshot(request(uri, Some(&format!("fill-{i}")), "{}"))
                .await
                .unwrap();
            if response.status() == StatusCode::SERVICE_UNAVAILABLE {
                let body = response.into_body().collect().await.unwrap().to_bytes();
                let problem: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(problem["code"], "idempotency_store_full");
                refused += 1;
                break;
            }
        }
        assert_eq!(refused, 1, "the 1-record store filled up");
    }

    let text = metrics.render();
    let count = |endpoint: &str, outcome: &str| count(&text, endpoint, outcome);
    for endpoint in ["POST /create", "POST /layered"] {
        // `executed` also counts the request that filled the 1-record store, when it was this
        // endpoint's (the two faces share one full store).
        assert!(count(endpoint, "executed") >= 1, "{endpoint}: {text}");
        assert_eq!(count(endpoint, "replayed"), 1, "{endpoint}: {text}");
        assert_eq!(count(endpoint, "reused"), 1, "{endpoint}: {text}");
        assert_eq!(count(endpoint, "invalid"), 2, "{endpoint}: {text}");
        assert_eq!(count(endpoint, "store_full"), 1, "{endpoint}: {text}");
        assert_eq!(count(endpoint, "store_error"), 0, "{endpoint}: {text}");
    }
    assert_eq!(count("POST /create", "released"), 1, "{text}");
    assert_eq!(
        count("POST /layered", "released"),
        2,
        "the layer counts the rejection it released: {text}"
    );

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("idempotency"), "spans are emitted: {logs}");
    assert!(logs.contains("outcome"), "{logs}");
    for secret in [SECRET, "other-secret-1234", "malformed-secret-9b2e"] {
        assert!(
            !logs.contains(secret),
            "the raw key leaked into the logs:\n{logs}"
        );
    }
}

#[idempotent(scope = "global", key = "required", name = "orders.leave")]
async fn leave(body: Json<Value>) -> (StatusCode, Json<Value>) {
    plain_create(body).await
}

/// Sends a keyed request to `/leave`; its status.
async fn send_leave(router: &Router, key: &str, body: &str) -> StatusCode {
    let response = router
        .clone()
        .oneshot(request("/leave", Some(key), body))
        .await;
    response.unwrap().status()
}

/// Sends `key` until its record is free and the handler runs (201), for up to 5 s.
async fn settle(router: &Router, key: &str) {
    for _ in 0..100 {
        if send_leave(router, key, "{}").await == StatusCode::CREATED {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{key} never ran");
}

/// A caller that leaves before its claim settles is counted once, as `cancelled`, whatever its
/// claim then finds (the record to own, released at once, or a result to replay); a caller
/// refused past the store deadline is counted `store_error`, and not again when its claim lands;
/// a caller that stays is counted by what it got.
#[tokio::test]
async fn callers_that_leave_are_counted_once() {
    let metrics = metrics();
    let (store, stall) = Stall::wrapping(MemoryStore::new());
    let idem = Idempotency::builder()
        .store(store)
        .store_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let router = Router::new().route("/leave", post(leave)).with_state(idem);
    assert_eq!(
        send_leave(&router, "done", r#"{"a":1}"#).await,
        StatusCode::CREATED
    );

    // Two callers leave while their claims wait on the store: a retry of the completed request
    // (the same JSON, written otherwise) and a fresh request.
    stall.start().await;
    let leaving = [("done", r#"{ "a": 1 }"#), ("fresh", "{}")].map(|(key, body)| {
        let router = router.clone();
        tokio::spawn(async move { send_leave(&router, key, body).await })
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    for caller in leaving {
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
    }
    stall.end().await;
    // The fresh claim landed, and was released for the retry.
    settle(&router, "fresh").await;
    let text = metrics.render();
    assert_eq!(
        count(&text, "orders.leave", "cancelled"),
        2,
        "the two callers that left: {text}"
    );

    // A caller the store keeps past its deadline is refused; its claim lands later.
    stall.start().await;
    assert_eq!(
        send_leave(&router, "late", "{}").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    stall.end().await;
    settle(&router, "late").await;
    assert_eq!(
        send_leave(&router, "done", r#"{"a":1}"#).await,
        StatusCode::CREATED
    );

    let text = metrics.render();
    let count = |outcome: &str| count(&text, "orders.leave", outcome);
    assert_eq!(count("cancelled"), 2, "not the refused caller: {text}");
    assert_eq!(count("store_error"), 1, "the refused caller: {text}");
    assert_eq!(
        count("executed"),
        3,
        "done, and the retries of fresh and late: {text}"
    );
    assert_eq!(
        count("replayed"),
        1,
        "the caller that stayed for done's replay: {text}"
    );
}
