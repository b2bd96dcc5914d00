//! Many records and many claimers at once, and what the records carry: purge batches,
//! concurrent claims, large and binary payloads.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::support::*;
use crate::store::{Admin, Fence, Store};

/// `purge_expired` deletes at most `limit` records per call, only those expired at `now` (in
/// flight or completed), and for good.
pub async fn purge_is_bounded_and_takes_only_expired_records<S: Store + Clone>(store: S) {
    let now = at(HOUR);
    let ok = b"ok".as_slice();
    // Five expired records, completed and in flight, one expiring exactly now.
    for n in 1..=5u8 {
        let expires_at = at(HOUR - ms(u64::from(5 - n)));
        let (k, f) = (key(n), fp(n));
        let claimed = claim_until(&store, &k, &f, token(1), at(ms(0)), expires_at).await;
        assert_eq!(claimed, ACQUIRED);
        if n % 2 == 0 {
            let held = complete(&store, &k, token(1), ok, expires_at).await;
            assert_eq!(held, Fence::Held);
        }
    }
    // Three live ones.
    for n in 10..13u8 {
        let (k, f) = (key(n), fp(n));
        assert_eq!(claim(&store, &k, &f, token(1), at(ms(0))).await, ACQUIRED);
        if n == 10 {
            let held = complete(&store, &k, token(1), ok, at(TTL)).await;
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
        completed(fp(10), ok)
    );
    for n in 11..13u8 {
        let claimed = claim(&store, &key(n), &fp(n), token(2), later).await;
        // Their leases lapsed long ago: the same request takes them over, so they were there.
        assert_eq!(claimed, TOOK_OVER);
    }
    assert_eq!(purge(&store, later, 100).await, 0);
}

/// Of 50 claimers of an absent record at once, exactly one acquires it, and only its token
/// completes it.
pub async fn concurrent_claimers_one_acquires<S: Store + Clone>(store: S) {
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
    let ok = b"once".as_slice();
    let loser = (winners[0] + 1) % CLAIMERS;
    let lost = complete(&store, &k, token(loser), ok, at(TTL)).await;
    assert_eq!(lost, Fence::Lost);
    let held = complete(&store, &k, token(winners[0]), ok, at(TTL)).await;
    assert_eq!(held, Fence::Held);
}

/// Of 50 claimers of a lapsed record at once, exactly one takes it over; the others see it in
/// flight under the new lease.
pub async fn concurrent_takeover_one_wins<S: Store + Clone>(store: S) {
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

/// Payloads of several megabytes, incompressible and highly compressible, come back byte for byte.
pub async fn large_payloads_round_trip_exactly<S: Store + Clone>(store: S) {
    let mut rng = fastrand::Rng::with_seed(0x1de4);
    // Incompressible: a store that compresses must fall back to the raw bytes.
    let random: Vec<u8> = (0..6 << 20).map(|_| rng.u8(..)).collect();
    // Compressible: a store that compresses must restore it exactly.
    let text: Vec<u8> = b"{\"id\":\"ch_1\",\"amount\":100}\n"
        .iter()
        .copied()
        .cycle()
        .take(8 << 20)
        .collect();
    for (n, payload) in [(1, random), (2, text)] {
        let replayed = round_trip(&store, n, &payload, Some(200)).await;
        assert_eq!(replayed.len(), payload.len());
        assert!(replayed == payload, "payload {n} changed in the store");
    }
}

/// Payloads are opaque bytes: every byte value, NUL and invalid UTF-8 included, and the empty
/// payload, come back exactly, with the status kept beside them or none.
pub async fn binary_payloads_round_trip_exactly<S: Store + Admin + Clone>(store: S) {
    // Every byte value, NUL and invalid UTF-8 included.
    let payload: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    assert_eq!(round_trip(&store, 1, &payload, Some(422)).await, payload);
    // An empty payload, without a status (what a face other than HTTP stores).
    assert_eq!(round_trip(&store, 2, &[], None).await, b"".as_slice());
    // The status is kept as given, beside the payload.
    let binary = store.read_record(&key(1)).await.unwrap().expect("record 1");
    assert_eq!(binary.status, Some(422));
    let empty = store.read_record(&key(2)).await.unwrap().expect("record 2");
    assert_eq!(empty.status, None);
    assert_eq!(
        empty.payload,
        Some(bytes::Bytes::new()),
        "an empty payload is a payload"
    );
}
