//! The object store's own behaviour beyond the conformance suite every store passes: purges
//! delete expired records and tombstones, and leave a record being deleted to its purge
//! (`tests/tests/bucket.rs` races purges against claims).

use object_store::memory::InMemory;

use super::*;
use crate::core::fingerprint::Fingerprint;

const T0: i64 = 1_700_000_000_250;

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millis(T0 + ms)
}

fn key(i: u32) -> RecordKey {
    let mut bytes = [0; 32];
    bytes[28..].copy_from_slice(&i.to_be_bytes());
    RecordKey::from_bytes(bytes)
}

async fn store() -> (BucketStore, Arc<InMemory>) {
    let objects = Arc::new(InMemory::new());
    (BucketStore::new(objects.clone()).await.unwrap(), objects)
}

async fn claim(
    store: &BucketStore,
    key: &RecordKey,
    token: i64,
    now: i64,
    ttl: i64,
) -> Result<Claim, StoreError> {
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    store
        .claim(ClaimRequest {
            key,
            fingerprint: &fingerprint,
            token: LeaseToken::from_i64(token),
            now: at(now),
            lease_until: at(now + 60_000),
            expires_at: at(now + ttl),
            operation: "op",
            scope: "global",
            scope_value: "",
            tenant: 0,
        })
        .await
}

/// How many objects the store holds under its prefix.
async fn objects(objects: &InMemory) -> usize {
    let listed = objects.list_with_delimiter(Some(&Path::from("idem"))).await;
    listed.unwrap().objects.len()
}

const ACQUIRED: Claim = Claim::Acquired { took_over: false };

#[tokio::test]
async fn a_purge_deletes_expired_records_and_tombstones_and_keeps_the_rest() {
    let (store, raw) = store().await;
    // Three expired, two released (tombstones), two live.
    for i in 0..3 {
        assert_eq!(claim(&store, &key(i), 1, 0, 1_000).await.unwrap(), ACQUIRED);
    }
    for i in 10..12 {
        assert_eq!(
            claim(&store, &key(i), 1, 0, 3_600_000).await.unwrap(),
            ACQUIRED
        );
        let released = store.release(&key(i), LeaseToken::from_i64(1)).await;
        assert_eq!(released.unwrap(), Fence::Held);
    }
    for i in 20..22 {
        assert_eq!(
            claim(&store, &key(i), 1, 0, 3_600_000).await.unwrap(),
            ACQUIRED
        );
    }
    // A probe object left by a process that died while starting is not a record.
    let probe = Path::from("idem/.probe-0000000000000001");
    raw.put(&probe, Bytes::from_static(b"probe").into())
        .await
        .unwrap();
    assert_eq!(objects(&raw).await, 8);

    // Bounded: two expired records per call, and two tombstones, which are not counted.
    assert_eq!(store.purge_expired(at(5_000), 2).await.unwrap(), 2);
    assert_eq!(objects(&raw).await, 4);
    assert_eq!(store.purge_expired(at(5_000), 2).await.unwrap(), 1);
    assert_eq!(store.purge_expired(at(5_000), 2).await.unwrap(), 0);
    assert_eq!(objects(&raw).await, 3, "the live records and the probe");
    // The old owners cannot resurrect what was deleted, and the keys claim afresh.
    let lost = store.release(&key(0), LeaseToken::from_i64(1)).await;
    assert_eq!(lost.unwrap(), Fence::Lost);
    assert_eq!(
        claim(&store, &key(0), 2, 5_000, 60_000).await.unwrap(),
        ACQUIRED
    );
    assert_eq!(
        claim(&store, &key(10), 2, 5_000, 60_000).await.unwrap(),
        ACQUIRED
    );
    // Live records are untouched.
    let live = claim(&store, &key(20), 2, 5_000, 60_000).await.unwrap();
    assert!(matches!(live, Claim::InFlight { .. }), "{live:?}");
}

#[tokio::test]
async fn a_claim_never_writes_over_a_record_being_deleted_until_its_purge_is_surely_gone() {
    let (store, raw) = store().await;
    let path = store.path(&key(1));
    let mark = |since: i64| encode(&Stored::Retiring { since: at(since) });
    raw.put(&path, mark(0).into()).await.unwrap();
    // Marked a moment ago: the claim waits for the delete, which does not come, and refuses.
    let refused = claim(&store, &key(1), 1, 1_000, 60_000).await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    assert_eq!(
        raw.get(&path).await.unwrap().bytes().await.unwrap(),
        mark(0)
    );
    // The delete lands while a claim waits: the claim creates the record.
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { claim(&store, &key(1), 1, 1_000, 60_000).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw.delete(&path).await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), ACQUIRED);
    // A mark older than the grace belongs to a purge that died: the key is free.
    let stale = key(2);
    let stale_path = store.path(&stale);
    raw.put(&stale_path, mark(0).into()).await.unwrap();
    let grace = RETIRE_GRACE.as_millis() as i64;
    assert_eq!(
        claim(&store, &stale, 1, grace, 60_000).await.unwrap(),
        ACQUIRED
    );
    // And a purge deletes such a mark like a tombstone.
    raw.put(&stale_path, mark(0).into()).await.unwrap();
    let purged = store.purge_expired(at(grace), 10).await.unwrap();
    assert_eq!(purged, 1, "key 1's record expired; the mark is not counted");
    assert!(raw.get(&stale_path).await.is_err(), "the mark is deleted");
    assert_eq!(objects(&raw).await, 0);
}
