//! A duplicate in wait mode (`in_flight = "wait"`) polls the store with a backoff that grows to
//! 250 ms: a few claims a second however long the first request runs, never a busy loop on the
//! store; and it replays the first response once that lands.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, MemoryStore, Store};
use idem_runtime::{Idempotency, RecordKey, StoreError, idempotent};
use idem_tests::Gate;
use tower::ServiceExt;

/// A memory store that counts the claims it answers.
#[derive(Clone, Default)]
struct Counting {
    inner: MemoryStore,
    claims: Arc<AtomicUsize>,
}

impl Store for Counting {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(request).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.inner.complete(key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.inner.release(key, token).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.inner.renew(key, token, lease_until).await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.inner.purge_expired(now, limit).await
    }
}

/// Waits at the gate, then answers 201.
#[idempotent(scope = "global", in_flight = "wait")]
async fn slow(State(gate): State<Gate>) -> StatusCode {
    gate.pass().await;
    StatusCode::CREATED
}

#[derive(Clone, axum::extract::FromRef)]
struct App {
    idempotency: Idempotency,
    gate: Gate,
}

fn request() -> Request<Body> {
    Request::post("/slow")
        .header("idempotency-key", "k")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_waiting_duplicate_polls_with_backoff_and_replays() {
    let store = Counting::default();
    let claims = store.claims.clone();
    let gate = Gate::default();
    let idempotency = Idempotency::builder()
        .store(store)
        .wait_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let router = Router::new().route("/slow", post(slow)).with_state(App {
        idempotency,
        gate: gate.clone(),
    });

    let first = tokio::spawn(router.clone().oneshot(request()));
    gate.entered().await;
    let duplicate = tokio::spawn(router.clone().oneshot(request()));
    // The first request runs for 1.5 s while its duplicate waits.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let polled = claims.load(Ordering::SeqCst) - 1;
    gate.open();

    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
    let replay = duplicate.await.unwrap().unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert!(replay.headers().contains_key("idempotent-replayed"));
    // 10, 20, 40, 80, 160, then 250 ms apart: about ten claims in 1.5 s. A busy loop makes
    // thousands.
    assert!(
        (3..=20).contains(&polled),
        "the duplicate claimed {polled} times in 1.5 s"
    );
}
