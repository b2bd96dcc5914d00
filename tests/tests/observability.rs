//! Metrics and logs: `idempotency_requests_total{endpoint, outcome}` counts every outcome, the
//! same way through the attribute and the layer, each request once (callers that leave too),
//! and the client's key never appears in logs, only its hash; `idempotency_in_flight{endpoint}`
//! comes back to 0 however operations end; `idempotency_replay_age_seconds{endpoint}` observes
//! the age of each replay, on both replay paths.
//!
//! The tests share the process-wide recorder (each counts its own endpoints); one installs the
//! process-wide subscriber.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::FromRequest;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, KeyMode, OperationError, idempotent};
use idem_tests::Gate;
use idem_tests::metrics::{recorder as metrics, requests as count, sample};
use serde_json::Value;
use tower::ServiceExt;

#[allow(dead_code)] // only the in-process wrapper is used here
#[path = "hangups/stall.rs"]
mod stall;

use idem_runtime::IdempotencyLayer;
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
        .layer(IdempotencyLayer::new(&idem).key(KeyMode::Required));
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

/// An operation that ends as told: with an output, an error, or a panic.
async fn ending(how: &'static str) -> Result<u32, String> {
    match how {
        "output" => Ok(7),
        "error" => Err("failed".to_owned()),
        _ => panic!("the operation panicked on purpose"),
    }
}

/// `idempotency_in_flight` counts an operation from its claim to the end of its work, once,
/// whatever the end: an output stored, an error released, a panic, a caller that left while it
/// ran (the work runs on without it); a duplicate refused meanwhile (a 409 over HTTP) is not an
/// operation that runs.
#[tokio::test]
async fn in_flight_comes_back_to_zero_however_operations_end() {
    const NAME: &str = "metrics.in_flight";
    let metrics = metrics();
    let in_flight = || sample(&metrics.render(), "idempotency_in_flight", NAME);
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap();
    let run = |key: &'static str, how: &'static str| {
        let idem = idem.clone();
        tokio::spawn(async move {
            let operation = idem.operation(NAME);
            operation.run(key, (), move |()| ending(how)).await
        })
    };

    let stored = run("output", "output").await.unwrap();
    assert_eq!(stored.unwrap().into_inner(), 7);
    assert_eq!(in_flight(), Some(0.0));
    let released = run("error", "error").await.unwrap();
    assert!(matches!(released, Err(OperationError::Failed(_))));
    assert_eq!(in_flight(), Some(0.0));
    let panicked = run("panic", "panic").await.unwrap_err();
    assert!(panicked.is_panic());
    assert_eq!(in_flight(), Some(0.0));

    // A caller that leaves mid-run, and a duplicate refused while the operation runs.
    let gate = Gate::default();
    let held = gate.clone();
    let leaving = {
        let idem = idem.clone();
        tokio::spawn(async move {
            let operation = idem.operation(NAME).run("left", (), |()| async move {
                held.pass().await;
                Ok::<u32, String>(8)
            });
            operation.await
        })
    };
    gate.entered().await;
    assert_eq!(in_flight(), Some(1.0), "the held operation runs");
    let duplicate = run("left", "output").await.unwrap();
    assert!(matches!(duplicate, Err(OperationError::InFlight { .. })));
    assert_eq!(in_flight(), Some(1.0), "a refused duplicate runs nothing");
    leaving.abort();
    assert!(leaving.await.unwrap_err().is_cancelled());
    assert_eq!(
        in_flight(),
        Some(1.0),
        "its work runs on without the caller"
    );
    gate.open();
    // A retry that waits gets the output once it is stored, after the work ended.
    let retry = idem.operation(NAME).wait(true);
    let replayed = retry.run("left", (), |()| ending("panic")).await.unwrap();
    assert!(replayed.is_replayed());
    assert_eq!(replayed.into_inner(), 8);
    assert_eq!(in_flight(), Some(0.0));

    let text = metrics.render();
    for (outcome, n) in [("executed", 2), ("released", 2), ("in_progress", 1)] {
        assert_eq!(count(&text, NAME, outcome), n, "{outcome}: {text}");
    }
}

/// How many times `aged`'s body was extracted: the early replay (the same bytes, on a store
/// that reads in process) answers before the extractor, the claim's replay after it.
static AGED_EXTRACTED: AtomicUsize = AtomicUsize::new(0);

/// `Json<Value>`, counted in [`AGED_EXTRACTED`].
struct CountedJson(Value);

impl<S: Send + Sync> FromRequest<S> for CountedJson {
    type Rejection = Response;

    async fn from_request(request: Request<Body>, state: &S) -> Result<Self, Self::Rejection> {
        AGED_EXTRACTED.fetch_add(1, Ordering::SeqCst);
        let Json(value) = Json::<Value>::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Self(value))
    }
}

#[idempotent(scope = "global", key = "required", name = "metrics.replay_age")]
async fn aged(CountedJson(body): CountedJson) -> (StatusCode, Json<Value>) {
    (StatusCode::CREATED, Json(body))
}

/// A replay observes how long ago its result completed, by the engine's clock: the early replay
/// of the very same bytes and the claim's replay of the same JSON written otherwise alike.
#[tokio::test]
async fn replays_observe_the_age_of_their_result() {
    const NAME: &str = "metrics.replay_age";
    let metrics = metrics();
    let clock = ManualClock::new();
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .clock(clock.clone())
        .build()
        .unwrap();
    let router = Router::new().route("/aged", post(aged)).with_state(idem);
    let send = |body: &'static str| {
        let response = router
            .clone()
            .oneshot(request("/aged", Some("aged-1"), body));
        async move { response.await.unwrap() }
    };
    let age = |series: &str| {
        let name = format!("idempotency_replay_age_seconds_{series}");
        sample(&metrics.render(), &name, NAME)
    };

    assert_eq!(send(r#"{"a":1}"#).await.status(), StatusCode::CREATED);
    assert_eq!(age("count"), None, "nothing replayed yet");
    clock.advance(Duration::from_secs(90));
    let early = send(r#"{"a":1}"#).await;
    assert!(early.headers().contains_key("idempotent-replayed"));
    assert_eq!(AGED_EXTRACTED.load(Ordering::SeqCst), 1, "replayed early");
    assert_eq!((age("count"), age("sum")), (Some(1.0), Some(90.0)));

    clock.advance(Duration::from_secs(30));
    let claimed = send(r#"{ "a": 1 }"#).await;
    assert!(claimed.headers().contains_key("idempotent-replayed"));
    assert_eq!(
        AGED_EXTRACTED.load(Ordering::SeqCst),
        2,
        "replayed by the claim"
    );
    assert_eq!((age("count"), age("sum")), (Some(2.0), Some(210.0)));

    let text = metrics.render();
    assert_eq!(count(&text, NAME, "replayed"), 2, "{text}");
    let in_bucket = |le: &str| {
        let series =
            format!("idempotency_replay_age_seconds_bucket{{endpoint=\"{NAME}\",le=\"{le}\"}} ");
        let line = text.lines().find_map(|l| l.strip_prefix(&series));
        line.map(|n| n.trim().parse::<u64>().unwrap())
    };
    assert_eq!(in_bucket("60"), Some(0), "{text}");
    assert_eq!(in_bucket("300"), Some(2), "90 s and 120 s: {text}");
}
