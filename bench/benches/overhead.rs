//! What `#[idempotent]` costs per request, in process: the same handler bare and idempotent on
//! the `MemoryStore`, through `tower::ServiceExt::oneshot` on a `Router`, for JSON bodies of
//! 100 B, 1 KB, 10 KB and 1 MB.
//!
//! Per body size (group `overhead-<size>`):
//! - `bare`: the handler alone.
//! - `idem_fresh`: a new key every request (claim, run, store the response).
//! - `idem_replay`: the same key every request (early replay: the record read in process before
//!   the fingerprint, replayed).
//! - `idem_replay_claimed`: the same, on a memory store that hides its in-process reads, so
//!   the replay takes the fingerprint and the claim, as on a store across a network.
//! - `idem_in_flight`: duplicates of a request held open in its handler (409 in progress).
//! - `peer_fresh`, `peer_replay`: the same handler behind axum-idempotent (moka sessions).
//!
//! Every request carries an `Idempotency-Key` and a session cookie, bare ones included, so the
//! requests differ only in their route. Every sample builds a new store, so records from other
//! samples neither fill it nor speed it up.
//!
//! Group `fresh-parts-1KB` times, in the same run, the parts of a fresh 1 KB request beyond the
//! bare handler one by one, so that `overhead-1KB`'s `idem_fresh − bare` splits into shares:
//! `digests` (the fingerprint and the raw digest, as the fresh request computes them; of
//! which `fingerprint` alone and `raw_digest` alone), `key` (the client's key parsed, the
//! record key derived) and `store` (the memory store's claim and completion of a new record
//! with a 1 KB payload). The rest (the engine, the adapter, the response capture and its
//! payload) is the difference. Run: `cargo bench -p idem-bench --bench overhead`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use bytes::Bytes;
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use http::{HeaderValue, Method, Uri};
use idem_bench::app;
use idem_bench::inproc::{self, call, idem_router, request};
use idem_bench::{body, peer};
use idem_runtime::__private::{fingerprint_of_request, fresh_digests, raw_digest};
use idem_runtime::IdempotencyKey;
use idem_runtime::clock::{Clock, SystemClock};
use idem_runtime::store::{ClaimRequest, Completion, LeaseToken, RecordKey, Store};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Times `iters` requests to `path`, the key of request `i` given by `key(i)`.
async fn timed(
    router: &Router,
    path: &str,
    body: &Bytes,
    iters: u64,
    key: impl Fn(u64) -> u64,
    expect: StatusCode,
) -> Duration {
    let start = Instant::now();
    for i in 0..iters {
        let status = call(router, request(path, key(i), body)).await;
        assert_eq!(status, expect, "{path}");
    }
    start.elapsed()
}

/// `iters` replays of one completed request.
async fn replays(router: &Router, body: &Bytes, iters: u64) -> Duration {
    let first = call(router, request(app::IDEM, u64::MAX, body)).await;
    assert_eq!(first, StatusCode::CREATED);
    timed(
        router,
        app::IDEM,
        body,
        iters,
        |_| u64::MAX,
        StatusCode::CREATED,
    )
    .await
}

fn overhead(c: &mut Criterion) {
    let rt = runtime();
    for (label, size) in body::SIZES {
        let body = body::json(size);
        let mut group = c.benchmark_group(format!("overhead-{label}"));
        if size >= 1024 * 1024 {
            // Milliseconds per iteration: flat sampling keeps the run short.
            group.sample_size(20).sampling_mode(SamplingMode::Flat);
        }
        let body = &body;
        let rt = &rt;

        group.bench_function("bare", |b| {
            b.iter_custom(|iters| {
                let (router, _) = idem_router(0);
                rt.block_on(timed(
                    &router,
                    app::BARE,
                    body,
                    iters,
                    |i| i,
                    StatusCode::CREATED,
                ))
            });
        });

        group.bench_function("idem_fresh", |b| {
            b.iter_custom(|iters| {
                let (router, _) = idem_router(iters);
                rt.block_on(timed(
                    &router,
                    app::IDEM,
                    body,
                    iters,
                    |i| i,
                    StatusCode::CREATED,
                ))
            });
        });

        group.bench_function("idem_replay", |b| {
            b.iter_custom(|iters| rt.block_on(replays(&idem_router(1).0, body, iters)));
        });

        group.bench_function("idem_replay_claimed", |b| {
            b.iter_custom(|iters| {
                let store = inproc::ClaimedReplays(inproc::store(1));
                rt.block_on(replays(&inproc::idem_router_on(store).0, body, iters))
            });
        });

        group.bench_function("idem_in_flight", |b| {
            b.iter_custom(|iters| {
                let (router, gate) = idem_router(1);
                rt.block_on(async {
                    let first = request(app::HELD, u64::MAX, body);
                    let owner = router.clone();
                    let held = tokio::spawn(async move { call(&owner, first).await });
                    gate.entered.notified().await;
                    let elapsed = timed(
                        &router,
                        app::HELD,
                        body,
                        iters,
                        |_| u64::MAX,
                        StatusCode::CONFLICT,
                    )
                    .await;
                    gate.open.notify_one();
                    assert_eq!(held.await.expect("held request"), StatusCode::CREATED);
                    elapsed
                })
            });
        });

        group.bench_function("peer_fresh", |b| {
            b.iter_custom(|iters| {
                let router = peer::router();
                rt.block_on(timed(
                    &router,
                    peer::PEER,
                    body,
                    iters,
                    |i| i,
                    StatusCode::CREATED,
                ))
            });
        });

        group.bench_function("peer_replay", |b| {
            b.iter_custom(|iters| {
                let router = peer::router();
                rt.block_on(async {
                    let first = call(&router, request(peer::PEER, u64::MAX, body)).await;
                    assert_eq!(first, StatusCode::CREATED);
                    timed(
                        &router,
                        peer::PEER,
                        body,
                        iters,
                        |_| u64::MAX,
                        StatusCode::CREATED,
                    )
                    .await
                })
            });
        });
        group.finish();
    }
}

/// The parts of a fresh 1 KB request beyond the bare handler, each alone (see the top).
fn fresh_parts(c: &mut Criterion) {
    let body = body::json(1024);
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static(app::IDEM);
    let mut group = c.benchmark_group("fresh-parts-1KB");
    group.bench_function("digests", |b| {
        b.iter(|| fresh_digests(&Method::POST, &uri, Some(&json), black_box(&body)));
    });
    group.bench_function("fingerprint", |b| {
        b.iter(|| fingerprint_of_request(&Method::POST, &uri, Some(&json), black_box(&body)));
    });
    group.bench_function("raw_digest", |b| {
        b.iter(|| raw_digest(&Method::POST, &uri, Some(&json), black_box(&body)));
    });
    group.bench_function("key", |b| {
        let header = b"bench-key-00000000000000a1";
        b.iter(|| {
            let key = IdempotencyKey::parse(black_box(header)).expect("a valid key");
            RecordKey::derive("global", "", "POST /idem", &key)
        });
    });
    let rt = runtime();
    let payload = vec![b'x'; 1024 + 33];
    group.bench_function("store", |b| {
        b.iter_custom(|iters| {
            let store = inproc::store(iters);
            let (fingerprint, _) = fresh_digests(&Method::POST, &uri, Some(&json), &body);
            rt.block_on(async {
                let start = Instant::now();
                for i in 0..iters {
                    let mut bytes = [0u8; 32];
                    bytes[..8].copy_from_slice(&i.to_le_bytes());
                    let key = RecordKey::from_bytes(bytes);
                    let now = SystemClock.now();
                    let token = LeaseToken::random();
                    let expires_at = now.after(Duration::from_secs(86_400));
                    let claim = ClaimRequest {
                        key: &key,
                        fingerprint: &fingerprint,
                        token,
                        now,
                        lease_until: now.after(Duration::from_secs(60)),
                        expires_at,
                        operation: "POST /idem",
                        scope: "global",
                        scope_value: "",
                        tenant: 0,
                    };
                    store.claim(claim).await.expect("claimed");
                    let completion = Completion {
                        payload: &payload,
                        status: Some(201),
                        completed_at: now,
                        expires_at,
                    };
                    store
                        .complete(&key, token, completion)
                        .await
                        .expect("completed");
                }
                start.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(benches, overhead, fresh_parts);
criterion_main!(benches);
