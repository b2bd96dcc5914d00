//! Stores that read in process (`MemoryStore`) answer a retry of the very bytes of a completed
//! request before anything else runs: no fingerprint, no body extractor, no claim. Other
//! serialisations of the same JSON, and records stored without the raw request's digest (by a
//! store that does not read in process, or an earlier release), replay through the usual path.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::{FromRef, FromRequest, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{
    Claim, ClaimRequest, Completion, Fence, LeaseToken, MemoryStore, ReadInProcess, Store,
};
use idem_runtime::{Idempotency, idempotent};
use idem_tests::{Hooked, capabilities_of};
use serde_json::{Value, json};
use tower::ServiceExt;

/// How many times the body extractor and the handler ran.
#[derive(Clone, Default)]
struct Counts {
    extracted: Arc<AtomicUsize>,
    ran: Arc<AtomicUsize>,
}

#[derive(Clone, FromRef)]
struct App {
    idempotency: Idempotency,
    counts: Counts,
}

/// `Json<Value>`, counting its extractions.
struct Counted(Value);

impl FromRequest<App> for Counted {
    type Rejection = Response;

    async fn from_request(request: Request, app: &App) -> Result<Self, Self::Rejection> {
        app.counts.extracted.fetch_add(1, Ordering::SeqCst);
        let Json(value) = Json::<Value>::from_request(request, app)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok(Counted(value))
    }
}

#[idempotent(scope = "global")]
async fn create(State(counts): State<Counts>, Counted(order): Counted) -> Response {
    let n = counts.ran.fetch_add(1, Ordering::SeqCst) + 1;
    (
        StatusCode::CREATED,
        Json(json!({ "order": n, "echo": order })),
    )
        .into_response()
}

fn app(store: impl Store) -> (Router, Counts) {
    let counts = Counts::default();
    let app = App {
        idempotency: Idempotency::builder().store(store).build().unwrap(),
        counts: counts.clone(),
    };
    (
        Router::new().route("/orders", post(create)).with_state(app),
        counts,
    )
}

struct Reply {
    status: StatusCode,
    replayed: bool,
    body: Bytes,
}

async fn send(router: &Router, body: &str) -> Reply {
    let request = axum::http::Request::post("/orders?x=1")
        .header("content-type", "application/json")
        .header("idempotency-key", "order-1")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        replayed,
        body,
    }
}

#[tokio::test]
async fn the_same_bytes_replay_before_the_body_is_extracted() {
    let (router, counts) = app(MemoryStore::new());
    let body = r#"{"amount":100,"currency":"usd"}"#;
    let first = send(&router, body).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(counts.extracted.load(Ordering::SeqCst), 1);

    let retry = send(&router, body).await;
    assert!(retry.replayed);
    assert_eq!((retry.status, &retry.body), (first.status, &first.body));
    assert_eq!(counts.extracted.load(Ordering::SeqCst), 1, "answered early");

    // Another serialisation of the same document: the usual path (extract, claim), same replay.
    let reordered = send(&router, r#"{ "currency": "usd", "amount": 100 }"#).await;
    assert!(reordered.replayed);
    assert_eq!(reordered.body, first.body);
    assert_eq!(counts.extracted.load(Ordering::SeqCst), 2);

    // Another document under the key is still refused as a reuse.
    let other = send(&router, r#"{"amount":101,"currency":"usd"}"#).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(counts.ran.load(Ordering::SeqCst), 1);
}

/// A `MemoryStore` seen as a store that does not read in process: it stores payloads as a
/// shared store (or an earlier release) does, without the raw request's digest.
fn remote(store: &MemoryStore) -> Hooked<MemoryStore> {
    Hooked::new(store.clone())
}

#[tokio::test]
async fn records_without_the_raw_digest_still_replay() {
    let memory = MemoryStore::new();
    let (router, _) = app(remote(&memory));
    let body = r#"{"amount":7}"#;
    let first = send(&router, body).await;
    assert_eq!(first.status, StatusCode::CREATED);

    // The same records, now read in process: no digest to compare, so the usual path replays.
    let (local, counts) = app(memory);
    let retry = send(&local, body).await;
    assert!(retry.replayed);
    assert_eq!(retry.body, first.body);
    assert_eq!(counts.extracted.load(Ordering::SeqCst), 1, "the usual path");
    assert_eq!(counts.ran.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn only_live_completed_records_are_peeked() {
    let store = MemoryStore::new();
    assert!(capabilities_of(store.clone()).reads_in_process().is_some());
    assert!(capabilities_of(remote(&store)).reads_in_process().is_none());
    let key = RecordKey::from_bytes([7; 32]);
    let fingerprint = idem_runtime::store::Fingerprint::of_bytes(b"x");
    let now = Timestamp::from_millis(1_000);
    let token = LeaseToken::random();
    assert_eq!(store.peek_completed(&key, now), None, "absent");
    let claim = ClaimRequest {
        key: &key,
        fingerprint: &fingerprint,
        token,
        now,
        lease_until: Timestamp::from_millis(31_000),
        expires_at: Timestamp::from_millis(100_000),
        operation: "op",
        scope: "global",
        scope_value: "",
        tenant: 0,
    };
    assert_eq!(
        store.claim(claim).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    assert_eq!(store.peek_completed(&key, now), None, "in flight");
    let completion = Completion {
        payload: b"stored",
        status: None,
        completed_at: now,
        expires_at: Timestamp::from_millis(50_000),
    };
    assert_eq!(
        store.complete(&key, token, completion).await.unwrap(),
        Fence::Held
    );
    assert_eq!(
        store.peek_completed(&key, Timestamp::from_millis(49_999)),
        Some((Bytes::from_static(b"stored"), Some(now))),
        "the payload, and when it completed"
    );
    assert_eq!(
        store.peek_completed(&key, Timestamp::from_millis(50_000)),
        None,
        "expired"
    );
}
