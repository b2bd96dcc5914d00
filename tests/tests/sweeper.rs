//! The background sweeper purges expired records, in bounded batches, without being asked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use idem_runtime::clock::{ManualClock, Timestamp};
use idem_runtime::store::{MemoryStore, Store};
use idem_runtime::{Idempotency, StoreError, idempotent};
use idem_tests::{Hooked, Hooks};
use tower::ServiceExt;

#[idempotent(scope = "global", ttl = "1m")]
async fn create() -> StatusCode {
    StatusCode::CREATED
}

/// An engine on `store` and a manual clock, with `records` completed records stored through it.
async fn with_records(store: impl Store, records: usize) -> (Idempotency, ManualClock) {
    let clock = ManualClock::new();
    let idem = Idempotency::builder()
        .store(store)
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Router::new()
        .route("/create", post(create))
        .with_state(idem.clone());
    for i in 0..records {
        let request = Request::post("/create").header("idempotency-key", format!("k{i}"));
        let response = app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    (idem, clock)
}

/// Waits (bounded, no timing assertion) until `store` holds no record.
async fn until_empty(store: &MemoryStore, why: &str) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !store.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect(why);
}

#[tokio::test]
async fn the_sweeper_purges_expired_records_in_batches() {
    let store = MemoryStore::new();
    let (idem, clock) = with_records(store.clone(), 25).await;
    assert_eq!(store.len(), 25);

    // Nothing has expired yet: a sweep keeps everything.
    let sweeper = idem.spawn_sweeper(Duration::from_millis(5), 10);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.len(), 25, "live records are never purged");

    // Past the ttl, the sweeper empties the store in batches of 10.
    clock.advance(Duration::from_secs(61));
    until_empty(&store, "the sweeper should purge every expired record").await;
    sweeper.abort();
}

/// Hooks that note how many records each purge removed.
#[derive(Clone, Default)]
struct Purges(Arc<Mutex<Vec<u64>>>);

impl Purges {
    fn purged(&self) -> Vec<u64> {
        self.0.lock().unwrap().clone()
    }
}

impl Hooks<MemoryStore> for Purges {
    async fn purge_expired(
        &self,
        inner: &MemoryStore,
        now: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let purged = inner.purge_expired(now, limit).await?;
        self.0.lock().unwrap().push(purged);
        Ok(purged)
    }
}

/// A backlog larger than a batch is not left for later ticks (an hour apart here): one tick
/// purges batch after batch while they come back full, and stops at the first that does not,
/// rather than polling an empty store.
#[tokio::test]
async fn one_tick_purges_full_batches_until_one_comes_back_short() {
    for (records, batches) in [(25, vec![10, 10, 5]), (20, vec![10, 10, 0])] {
        let sweeps = Hooked::<MemoryStore, Purges>::default();
        let (idem, clock) = with_records(sweeps.clone(), records).await;
        clock.advance(Duration::from_secs(61));

        // An interval's first tick is at once; the next is an hour away.
        let sweeper = idem.spawn_sweeper(Duration::from_secs(3600), 10);
        until_empty(&sweeps.inner, "one tick should purge the whole backlog").await;
        // Time for a sweeper that did not stop to purge again.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(sweeps.hooks.purged(), batches, "{records} expired records");
        sweeper.abort();
    }
}
