//! Rules about time and concurrency: in-flight duplicates, waiting, panics, clients that hang
//! up, leases, expiry, limits and store failure.

use std::time::Duration;

use axum::http::StatusCode;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, clock::ManualClock};

use crate::support::{App, Calls, Setup, Store, harness, harness_with, post_json, send};
use idem_tests::Gate;

pub(crate) async fn in_flight_duplicate_is_409_with_retry_after(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone();
    let first =
        tokio::spawn(async move { send(&router, post_json("/gated", Some("k"), "{}")).await });
    h.app.gate.entered().await;

    let duplicate = h.send(post_json("/gated", Some("k"), "{}")).await;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.code(), "idempotency_key_in_progress");
    assert_eq!(duplicate.headers["retry-after"], "1");

    h.app.gate.open();
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    let retry = h.send(post_json("/gated", Some("k"), "{}")).await;
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn in_flight_duplicate_with_other_body_is_422(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone();
    let first =
        tokio::spawn(async move { send(&router, post_json("/gated", Some("k"), "{}")).await });
    h.app.gate.entered().await;
    let other = h
        .send(post_json("/gated", Some("k"), r#"{"amount":2}"#))
        .await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(other.code(), "idempotency_key_reused");
    h.app.gate.open();
    first.await.unwrap();
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn wait_mode_replays_the_first_response(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone();
    let first =
        tokio::spawn(async move { send(&router, post_json("/gated-wait", Some("k"), "{}")).await });
    h.app.gate.entered().await;
    let router = h.router.clone();
    let waiter =
        tokio::spawn(async move { send(&router, post_json("/gated-wait", Some("k"), "{}")).await });
    // Give the waiter time to find the record in flight (it then polls); the assertions below
    // hold whatever the interleaving, this only makes the waiting path the one exercised.
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.app.gate.open();
    let first = first.await.unwrap();
    let waiter = waiter.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(waiter.status, StatusCode::CREATED);
    assert_eq!(waiter.body, first.body);
    assert_eq!(
        h.calls(),
        1,
        "the waiting duplicate did not run the handler"
    );
}

pub(crate) async fn wait_mode_gives_up_with_409(setup: Setup) {
    let h = harness_with(setup, |b| b.wait_timeout(Duration::from_millis(50))).await;
    let router = h.router.clone();
    let first =
        tokio::spawn(async move { send(&router, post_json("/gated-wait", Some("k"), "{}")).await });
    h.app.gate.entered().await;
    let waiter = h.send(post_json("/gated-wait", Some("k"), "{}")).await;
    assert_eq!(waiter.status, StatusCode::CONFLICT);
    assert_eq!(waiter.code(), "idempotency_key_in_progress");
    h.app.gate.open();
    first.await.unwrap();
    assert_eq!(h.calls(), 1);
}

pub(crate) async fn panics_release_the_key(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone();
    let body = r#"{"panic":true}"#;
    let panicked =
        tokio::spawn(async move { send(&router, post_json("/charges", Some("k"), body)).await })
            .await;
    assert!(
        panicked.unwrap_err().is_panic(),
        "the panic propagates to the server as before"
    );
    // Released before the panic continued: the retry runs again at once.
    let retry = h
        .send(post_json(
            "/charges",
            Some("k"),
            body.replace("true", "false").as_str(),
        ))
        .await;
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert_eq!(h.calls(), 2);
}

/// A client that hangs up (the request future dropped, as hyper drops it) does not stop a
/// handler that may already have acted: it runs to its end, its response is stored, and the
/// retry waits for it (409 meanwhile) and then replays it. The handler runs once.
pub(crate) async fn a_dropped_request_runs_to_its_end_and_its_retry_replays(setup: Setup) {
    let h = harness(setup).await;
    let router = h.router.clone();
    let first =
        tokio::spawn(async move { send(&router, post_json("/gated", Some("k"), "{}")).await });
    h.app.gate.entered().await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());

    // The handler still holds the record: the retry is told to wait, not run again.
    let during = h.send(post_json("/gated", Some("k"), "{}")).await;
    assert_eq!(during.status, StatusCode::CONFLICT, "{during:?}");
    assert_eq!(during.code(), "idempotency_key_in_progress");

    h.app.gate.open();
    let retry = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let reply = h.send(post_json("/gated", Some("k"), "{}")).await;
            if reply.status != StatusCode::CONFLICT {
                break reply;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the dropped request's handler finishes and stores its response");
    assert_eq!(retry.status, StatusCode::CREATED, "{retry:?}");
    assert!(
        retry.replayed(),
        "the stored response of the run the client left"
    );
    assert_eq!(retry.json()["call"], 1);
    assert_eq!(h.calls(), 1, "the handler ran once");
}

pub(crate) async fn lapsed_lease_is_taken_over_and_the_old_owner_is_fenced(setup: Setup) {
    let h = harness_with(setup, |b| b.lease(Duration::from_secs(30))).await;
    let router = h.router.clone();
    let stale =
        tokio::spawn(async move { send(&router, post_json("/gated", Some("k"), "{}")).await });
    h.app.gate.entered().await;

    // The owner looks crashed: its lease lapses without renewal (renewal runs on real time).
    h.clock.advance(Duration::from_secs(31));
    let router = h.router.clone();
    let taker =
        tokio::spawn(async move { send(&router, post_json("/gated", Some("k"), "{}")).await });
    h.app.gate.entered().await;
    assert_eq!(h.calls(), 2, "the retry took over and ran");

    // The new owner finishes first; then the stale owner's late completion must not overwrite it.
    h.app.gate.open();
    h.app.gate.open();
    let (a, b) = (stale.await.unwrap(), taker.await.unwrap());
    let replay = h.send(post_json("/gated", Some("k"), "{}")).await;
    assert!(replay.replayed());
    let winner = replay.json()["call"].as_u64().unwrap();
    assert_eq!(
        winner, 2,
        "the record belongs to the request that took over"
    );
    assert_eq!(b.json()["call"], 2);
    assert_eq!(
        a.json()["call"],
        1,
        "the stale owner still answered its own client"
    );
}

pub(crate) async fn completed_records_expire_after_their_ttl(setup: Setup) {
    let h = harness(setup).await;
    h.send(post_json("/payouts", Some("p"), "")).await;
    h.clock.advance(Duration::from_secs(59 * 60));
    assert!(
        h.send(post_json("/payouts", Some("p"), ""))
            .await
            .replayed(),
        "within the 1h ttl"
    );
    h.clock.advance(Duration::from_secs(2 * 60));
    let after = h.send(post_json("/payouts", Some("p"), "")).await;
    assert!(!after.replayed(), "expired records are invisible at once");
    assert_eq!(h.calls(), 2);
    // Purge removes only what has expired.
    h.clock.advance(Duration::from_secs(2 * 60 * 60));
    assert!(h.app.idem.purge_expired(100).await.unwrap() >= 1);
    assert_eq!(h.app.idem.purge_expired(100).await.unwrap(), 0);
}

pub(crate) async fn oversized_responses_are_sent_but_never_rerun(setup: Setup) {
    let h = harness_with(setup, |b| b.max_response_bytes(1024)).await;
    let request = || {
        axum::http::Request::post("/large")
            .header("idempotency-key", "k")
            .body(axum::body::Body::empty())
            .unwrap()
    };
    let first = h.send(request()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.body.len(),
        4096,
        "the first client gets the whole response"
    );
    let retry = h.send(request()).await;
    assert_eq!(retry.status, StatusCode::CONFLICT);
    assert_eq!(retry.code(), "idempotency_response_too_large");
    assert_eq!(retry.json()["original_status"], 200);
    assert!(retry.replayed());
    assert_eq!(h.calls(), 1, "the operation is never run again");
}

pub(crate) async fn store_failure_fails_closed_with_503(setup: Setup) {
    let calls = Calls::default();
    let mut outage = None;
    let idem = match setup.store {
        // A full memory store refuses new claims rather than evict what a retry may need.
        Store::Memory => {
            let store = MemoryStore::with_capacity(1);
            Idempotency::builder()
                .store(store)
                .scope("org", crate::support::org_of)
        }
        // A real outage: the database's pool is closed under the engine.
        Store::Sqlite => {
            let store = idem_tests::sqlite_store().await;
            store.pool().close().await;
            Idempotency::builder()
                .store(store)
                .scope("org", crate::support::org_of)
        }
        Store::Postgres => {
            let store = idem_tests::postgres_store().await;
            store.pool().close().await;
            Idempotency::builder()
                .store(store)
                .scope("org", crate::support::org_of)
        }
        Store::MySql => {
            let store = idem_tests::mysql_store().await;
            store.pool().close().await;
            Idempotency::builder()
                .store(store)
                .scope("org", crate::support::org_of)
        }
        // The server disappears behind the store's proxy (kept cut until the test ends).
        Store::Redis => {
            let (store, proxy) = idem_tests::redis::unreachable_store().await;
            outage = Some(proxy);
            Idempotency::builder()
                .store(store)
                .scope("org", crate::support::org_of)
        }
    }
    .clock(ManualClock::new())
    .build()
    .unwrap();
    let app = App {
        idem,
        calls: calls.clone(),
        gate: Gate::default(),
    };
    let router = crate::support::router(app, setup.face);
    // The memory store holds one record: the second distinct key is refused.
    let mut refused = None;
    for i in 0..=32 {
        let before = calls.get();
        let reply = send(
            &router,
            post_json("/charges", Some(&format!("k-{i}")), "{}"),
        )
        .await;
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(
                calls.get(),
                before,
                "the handler does not run when the store fails"
            );
            refused = Some(reply);
            break;
        }
    }
    let reply = refused.expect("the store should have refused a claim");
    let code = match setup.store {
        Store::Memory => "idempotency_store_full",
        _ => "idempotency_store_unavailable",
    };
    assert_eq!(reply.code(), code);
    // A full store says when room frees: the record holding it expires after the 24 h TTL,
    // and the memory store counts expiries in whole seconds, so it names the end of that
    // record's second (never earlier than the expiry, at most a second later). A failed store
    // gives the engine's `Retry-After`.
    let retry_after = &reply.headers["retry-after"];
    if matches!(setup.store, Store::Memory) {
        assert!(
            retry_after == "86400" || retry_after == "86401",
            "Retry-After {retry_after:?} should be the record's expiry, 24 h away"
        );
    } else {
        assert_eq!(retry_after, "1");
    }
    drop(outage);
}
