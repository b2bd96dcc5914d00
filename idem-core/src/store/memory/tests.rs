//! The memory store's own behaviour beyond the conformance suite every store passes: purges by
//! expiry across shards, room freed when records expire, and its hashing of keys.

use std::time::Duration;

use super::*;
use crate::testing::{self, at, request};

/// A key in shard `i % SHARDS` whose other bytes differ by `i`: the stores' test key `i` with
/// its first byte set.
fn key(i: u32) -> RecordKey {
    let mut bytes = *testing::key(i).as_bytes();
    bytes[0] = (i % 256) as u8;
    RecordKey::from_bytes(bytes)
}

async fn claim(
    store: &MemoryStore,
    key: &RecordKey,
    now: i64,
    ttl: i64,
) -> Result<Claim, StoreError> {
    store
        .claim(ClaimRequest {
            tenant: 9,
            ..request(key, 1, now, ttl, ("global", ""))
        })
        .await
}

#[tokio::test]
async fn batched_purges_drain_every_shard_and_leave_live_records() {
    let store = MemoryStore::new();
    for i in 0..1000 {
        claim(&store, &key(i), 0, 1_500).await.unwrap();
    }
    for i in 1000..1500 {
        claim(&store, &key(i), 0, 3_600_000).await.unwrap();
    }
    assert_eq!(store.purge_expired(at(1_499), 100).await.unwrap(), 0);
    let mut purged = Vec::new();
    loop {
        match store.purge_expired(at(1_500), 100).await.unwrap() {
            0 => break,
            n => purged.push(n),
        }
    }
    assert_eq!(purged.iter().sum::<u64>(), 1000, "{purged:?}");
    assert!(purged.iter().all(|n| *n <= 100), "{purged:?}");
    assert_eq!(store.len(), 500);
    for i in 1000..1500 {
        let held = claim(&store, &key(i), 2_000, 1_000).await.unwrap();
        assert!(
            matches!(held, Claim::InFlight { .. }),
            "record {i} survived"
        );
    }
}

#[tokio::test]
async fn a_full_store_frees_room_the_moment_a_record_expires_and_says_when() {
    let store = MemoryStore::with_capacity(1);
    claim(&store, &key(1), 0, 1_500).await.unwrap();
    let Err(StoreError::Full { retry_after, .. }) = claim(&store, &key(2), 400, 1_000).await else {
        panic!("a second record fits in a store of one");
    };
    let retry_after = retry_after.expect("when room frees");
    // Not before the record expires (1.1 s later), nor much after.
    assert!(
        (Duration::from_millis(1_100)..=Duration::from_millis(2_100)).contains(&retry_after),
        "{retry_after:?}"
    );
    assert_eq!(
        claim(&store, &key(2), 1_500, 1_000).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn keys_differing_anywhere_are_distinct_records() {
    let store = MemoryStore::new();
    // The same first byte (shard) and first eight bytes: only the last four differ.
    let keys: Vec<RecordKey> = (0..2000).map(|i| key(i * 256)).collect();
    for k in &keys {
        assert_eq!(
            claim(&store, k, 0, 60_000).await.unwrap(),
            Claim::Acquired { took_over: false }
        );
    }
    assert_eq!(store.len(), keys.len());
    for k in &keys {
        assert!(matches!(
            claim(&store, k, 1, 60_000).await.unwrap(),
            Claim::InFlight { .. }
        ));
    }
}

#[tokio::test]
async fn a_completed_record_is_purged_when_its_new_expiry_passes_not_its_claims() {
    let store = MemoryStore::new();
    let k = key(3);
    claim(&store, &k, 0, 1_000).await.unwrap();
    let completion = Completion {
        payload: b"response",
        status: Some(201),
        completed_at: at(500),
        expires_at: at(5_000),
    };
    assert_eq!(
        store
            .complete(&k, LeaseToken::from_i64(1), completion)
            .await
            .unwrap(),
        Fence::Held
    );
    assert_eq!(store.purge_expired(at(2_000), 100).await.unwrap(), 0);
    assert!(matches!(
        claim(&store, &k, 4_999, 1_000).await.unwrap(),
        Claim::Completed { .. }
    ));
    assert_eq!(store.purge_expired(at(5_000), 100).await.unwrap(), 1);
    assert!(store.is_empty());
}

#[tokio::test]
async fn released_and_replaced_records_leave_nothing_behind_for_the_purge() {
    let store = MemoryStore::new();
    for i in 0..100 {
        claim(&store, &key(i), 0, 1_000).await.unwrap();
    }
    for i in 0..50 {
        assert_eq!(
            store
                .release(&key(i), LeaseToken::from_i64(1))
                .await
                .unwrap(),
            Fence::Held
        );
    }
    // Expired, then claimed anew with a later expiry: the old life is gone with its expiry.
    for i in 50..100 {
        assert_eq!(
            claim(&store, &key(i), 1_000, 10_000).await.unwrap(),
            Claim::Acquired { took_over: false }
        );
    }
    assert_eq!(store.len(), 50);
    assert_eq!(store.purge_expired(at(5_000), 1_000).await.unwrap(), 0);
    assert_eq!(store.purge_expired(at(11_000), 1_000).await.unwrap(), 50);
    assert!(store.is_empty());
}
