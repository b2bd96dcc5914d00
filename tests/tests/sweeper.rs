//! The background sweeper purges expired records, in bounded batches, without being asked.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, idempotent};
use tower::ServiceExt;

#[idempotent(scope = "global", ttl = "1m")]
async fn create() -> StatusCode {
    StatusCode::CREATED
}

#[tokio::test]
async fn the_sweeper_purges_expired_records_in_batches() {
    let store = MemoryStore::new();
    let clock = ManualClock::new();
    let idem = Idempotency::builder()
        .store(store.clone())
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/create", post(create))
        .with_state(idem.clone());
    for i in 0..25 {
        let request = Request::post("/create").header("idempotency-key", format!("k{i}"));
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(store.len(), 25);

    // Nothing has expired yet: a sweep keeps everything.
    let sweeper = idem.spawn_sweeper(Duration::from_millis(5), 10);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.len(), 25, "live records are never purged");

    // Past the ttl, the sweeper empties the store in batches of 10 (bounded wait, no timing
    // assertion).
    clock.advance(Duration::from_secs(61));
    tokio::time::timeout(Duration::from_secs(10), async {
        while !store.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the sweeper should purge every expired record");
    sweeper.abort();
}
