//! A duplicate in wait mode (`in_flight = "wait"`) polls the store with a backoff that grows to
//! 250 ms: a few claims a second however long the first request runs, never a busy loop on the
//! store; it replays the first response once that lands, and answers 409 at its wait timeout,
//! not a backoff step later.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, idempotent};
use idem_tests::Gate;
use tower::ServiceExt;

#[allow(dead_code)] // only the in-process wrapper, never stalled, is used here: it counts claims
#[path = "hangups/stall.rs"]
mod stall;

use stall::Stall;

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

/// A router serving [`slow`] through `idempotency`, and the gate `slow` waits at.
fn router(idempotency: Idempotency) -> (Router, Gate) {
    let gate = Gate::default();
    let router = Router::new().route("/slow", post(slow)).with_state(App {
        idempotency,
        gate: gate.clone(),
    });
    (router, gate)
}

fn request() -> Request<Body> {
    Request::post("/slow")
        .header("idempotency-key", "k")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn a_waiting_duplicate_polls_with_backoff_and_replays() {
    let (store, _never) = Stall::wrapping(MemoryStore::new());
    let claims = store.hooks.claims();
    let (router, gate) = router(
        Idempotency::builder()
            .store(store)
            .wait_timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    );

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

/// In tokio's paused time, where every sleep lasts exactly what it asks: a duplicate that waits
/// in vain answers 409 at its `wait_timeout`, its last sleep cut short to end there.
#[tokio::test(start_paused = true)]
async fn a_waiting_duplicate_gives_up_at_its_wait_timeout_not_after() {
    let (router, gate) = router(
        Idempotency::builder()
            .store(MemoryStore::new())
            .wait_timeout(Duration::from_millis(1000))
            .build()
            .unwrap(),
    );

    let first = tokio::spawn(router.clone().oneshot(request()));
    gate.entered().await;
    let started = tokio::time::Instant::now();
    let duplicate = router.clone().oneshot(request()).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(duplicate.status(), StatusCode::CONFLICT);
    // Its sleeps (10, 20, 40, 80, 160, then 250 ms) overshoot 1 s by 60 ms uncut.
    assert!(
        (Duration::from_millis(1000)..Duration::from_millis(1005)).contains(&waited),
        "the duplicate answered after {waited:?}"
    );
    gate.open();
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::CREATED);
}
