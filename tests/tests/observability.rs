//! Metrics and logs: `idempotency_requests_total{endpoint, outcome}` counts every outcome, and
//! the client's key never appears in logs, only its hash.
//!
//! One test in this binary, because it installs the process-wide recorder and subscriber.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, idempotent};
use metrics_exporter_prometheus::PrometheusBuilder;
use serde_json::Value;
use tower::ServiceExt;

#[idempotent(scope = "global", key = "required")]
async fn create(Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let status = body["status"].as_u64().unwrap_or(201) as u16;
    (StatusCode::from_u16(status).unwrap(), Json(body))
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

fn request(key: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::post("/create").header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}

#[tokio::test]
async fn counts_every_outcome_and_never_logs_the_key() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let metrics = recorder.handle();
    metrics::set_global_recorder(recorder).unwrap();
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/create", post(create))
        .with_state(idem);
    let send = |req: Request<Body>| {
        let app = app.clone();
        async move { app.oneshot(req).await.unwrap().status() }
    };

    assert_eq!(send(request(Some(SECRET), "{}")).await, StatusCode::CREATED); // executed
    assert_eq!(send(request(Some(SECRET), "{}")).await, StatusCode::CREATED); // replayed
    assert_eq!(
        send(request(Some(SECRET), r#"{"a":1}"#)).await,
        StatusCode::UNPROCESSABLE_ENTITY
    ); // reused
    assert_eq!(send(request(None, "{}")).await, StatusCode::BAD_REQUEST); // invalid: missing
    assert_eq!(
        send(request(Some("bad key"), "{}")).await,
        StatusCode::BAD_REQUEST
    ); // invalid
    let released = request(Some("other-secret-1234"), r#"{"status":500}"#);
    assert_eq!(send(released).await, StatusCode::INTERNAL_SERVER_ERROR); // released

    // A store that refuses claims (a full memory store): `store_error`, answered 503.
    let full = Idempotency::builder()
        .store(MemoryStore::with_capacity(1))
        .build()
        .unwrap();
    let full = Router::new()
        .route("/create", post(create))
        .with_state(full);
    let mut refused = 0;
    for i in 0..=32 {
        let status = full
            .clone()
            .oneshot(request(Some(&format!("fill-{i}")), "{}"))
            .await
            .unwrap()
            .status();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            refused += 1;
            break;
        }
    }
    assert_eq!(refused, 1, "one shard of the 1-record store filled up");

    let text = metrics.render();
    let count = |outcome: &str| -> u64 {
        let needle = format!("outcome=\"{outcome}\"");
        text.lines()
            .find(|l| l.starts_with("idempotency_requests_total{") && l.contains(&needle))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    // `executed` also counts the requests that filled the small store.
    assert!(count("executed") >= 2, "{text}");
    assert_eq!(count("replayed"), 1, "{text}");
    assert_eq!(count("reused"), 1, "{text}");
    assert_eq!(count("invalid"), 2, "{text}");
    assert_eq!(count("released"), 1, "{text}");
    assert_eq!(count("store_error"), 1, "{text}");
    assert!(
        text.contains("endpoint=\"observability::create\""),
        "{text}"
    );

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("idempotency"), "spans are emitted: {logs}");
    assert!(logs.contains("outcome"), "{logs}");
    for secret in [SECRET, "other-secret-1234"] {
        assert!(
            !logs.contains(secret),
            "the raw key leaked into the logs:\n{logs}"
        );
    }
}
