//! Many records and many claimers at once, and what the records carry: purge batches,
//! concurrent claims, large and binary bodies, repeated headers.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use idem_runtime::StoredResponse;
use idem_runtime::store::{Fence, Store};
use tokio::sync::Barrier;

use crate::support::*;

pub(crate) async fn purge_is_bounded_and_takes_only_expired_records<S: Store + Clone>(store: S) {
    let now = at(HOUR);
    let ok = response("ok");
    // Five expired records, completed and in flight, one expiring exactly now.
    for n in 1..=5u8 {
        let expires_at = at(HOUR - ms(u64::from(5 - n)));
        let (k, f) = (key(n), fp(n));
        let claimed = claim_until(&store, &k, &f, token(1), at(ms(0)), expires_at).await;
        assert_eq!(claimed, ACQUIRED);
        if n % 2 == 0 {
            let held = complete(&store, &k, token(1), &ok, expires_at).await;
            assert_eq!(held, Fence::Held);
        }
    }
    // Three live ones.
    for n in 10..13u8 {
        let (k, f) = (key(n), fp(n));
        assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
        if n == 10 {
            let held = complete(&store, &k, token(1), &ok, at(TTL)).await;
            assert_eq!(held, Fence::Held);
        }
    }
    assert_eq!(purge(&store, now, 0).await, 0);
    assert_eq!(purge(&store, now, 2).await, 2);
    assert_eq!(purge(&store, now, 2).await, 2);
    assert_eq!(purge(&store, now, 100).await, 1);
    assert_eq!(purge(&store, now, 100).await, 0);
    // Purged records are gone; the old owners cannot resurrect them.
    for n in 1..=5u8 {
        assert_eq!(release(&store, &key(n), token(1)).await, Fence::Lost);
        let claimed = claim(&store, &key(n), &fp(n), token(2), now).await;
        assert_eq!(claimed, ACQUIRED);
    }
    // Live records are untouched.
    let later = at(HOUR + ms(1));
    assert_eq!(
        claim(&store, &key(10), &fp(10), token(2), later).await,
        completed(fp(10), &ok)
    );
    for n in 11..13u8 {
        let claimed = claim(&store, &key(n), &fp(n), token(2), later).await;
        // Their leases lapsed long ago: the same request takes them over, so they were there.
        assert_eq!(claimed, TOOK_OVER);
    }
    assert_eq!(purge(&store, later, 100).await, 0);
}

pub(crate) async fn concurrent_claimers_one_acquires<S: Store + Clone>(store: S) {
    const CLAIMERS: i64 = 50;
    let (k, f) = (key(1), fp(1));
    let start = Arc::new(Barrier::new(CLAIMERS as usize));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|n| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                (n, claim(&store, &k, &f, token(n), at(ms(0))).await)
            })
        })
        .collect();
    let mut winners = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            (n, ACQUIRED) => winners.push(n),
            (_, claim) => assert_eq!(claim, in_flight(f, at(LEASE))),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    // The winner's token is the one the record carries.
    let ok = response("once");
    let loser = (winners[0] + 1) % CLAIMERS;
    let lost = complete(&store, &k, token(loser), &ok, at(TTL)).await;
    assert_eq!(lost, Fence::Lost);
    let held = complete(&store, &k, token(winners[0]), &ok, at(TTL)).await;
    assert_eq!(held, Fence::Held);
}

pub(crate) async fn concurrent_takeover_one_wins<S: Store + Clone>(store: S) {
    const CLAIMERS: i64 = 50;
    let (k, f) = (key(1), fp(1));
    assert_eq!(claim(&store, &k, &f, token(-1), at(ms(0))).await, ACQUIRED);
    let start = Arc::new(Barrier::new(CLAIMERS as usize));
    let tasks: Vec<_> = (0..CLAIMERS)
        .map(|n| {
            let (store, start) = (store.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                claim(&store, &k, &f, token(n), at(LEASE)).await
            })
        })
        .collect();
    let mut took_over = 0;
    for task in tasks {
        match task.await.unwrap() {
            TOOK_OVER => took_over += 1,
            claim => assert_eq!(claim, in_flight(f, at(LEASE * 2))),
        }
    }
    assert_eq!(took_over, 1);
}

pub(crate) async fn large_bodies_round_trip_exactly<S: Store + Clone>(store: S) {
    let mut rng = fastrand::Rng::with_seed(0x1de4);
    // Incompressible: stored raw.
    let random: Vec<u8> = (0..6 << 20).map(|_| rng.u8(..)).collect();
    // Compressible: stored deflated, restored exactly.
    let text: Vec<u8> = b"{\"id\":\"ch_1\",\"amount\":100}\n"
        .iter()
        .copied()
        .cycle()
        .take(8 << 20)
        .collect();
    for (n, body) in [(1, random), (2, text)] {
        let stored = StoredResponse::new(StatusCode::OK, [], Bytes::from(body));
        let replayed = round_trip(&store, n, &stored).await;
        assert_eq!(replayed.body().len(), stored.body().len());
        assert!(replayed == stored, "body {n} changed in the store");
    }
}

pub(crate) async fn binary_bodies_and_header_values_round_trip<S: Store + Clone>(store: S) {
    // Every byte value, NUL and invalid UTF-8 included; opaque (non-ASCII) header bytes.
    let body: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let stored = StoredResponse::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        [
            header("content-type", "application/octet-stream"),
            (
                HeaderName::from_static("x-opaque"),
                HeaderValue::from_bytes(b"caf\xe9 \xff\x80").unwrap(),
            ),
        ],
        Bytes::from(body),
    );
    assert_eq!(round_trip(&store, 1, &stored).await, stored);
    // An empty body and no headers.
    let empty = StoredResponse::new(StatusCode::NO_CONTENT, [], Bytes::new());
    assert_eq!(round_trip(&store, 2, &empty).await, empty);
}

pub(crate) async fn repeated_headers_keep_their_order<S: Store + Clone>(store: S) {
    let stored = StoredResponse::new(
        StatusCode::ACCEPTED,
        [
            header("x-a", "1"),
            header("link", "</a>; rel=next"),
            header("x-a", "2"),
            header("vary", "accept"),
            header("link", "</b>; rel=prev"),
            header("x-a", "3"),
            header("x-empty", ""),
        ],
        Bytes::from_static(b"{}"),
    );
    let replayed = round_trip(&store, 1, &stored).await;
    assert_eq!(replayed.headers(), stored.headers());
    assert_eq!(replayed, stored);
}
