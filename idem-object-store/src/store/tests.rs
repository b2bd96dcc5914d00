//! The object store's own behaviour beyond the conformance suite every store passes: purges
//! delete expired records and tombstones, and leave a record being deleted to its purge;
//! listings read every record under the prefix and nothing else; a record keeps the scope it
//! was claimed in (`tests/tests/bucket.rs` races purges against claims, and operators against
//! each other).

use object_store::memory::InMemory;

use super::*;
use idem_core::store::Admin;
use idem_core::store::records::{Forgotten, RecordFilter, RecordState};
use idem_core::testing::{at, key, request};

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
    claim_in(store, key, token, now, ttl, ("global", "")).await
}

/// Claims `key` at `now` for a minute's lease, in `scope` and its value.
async fn claim_in(
    store: &BucketStore,
    key: &RecordKey,
    token: i64,
    now: i64,
    ttl: i64,
    (scope, scope_value): (&str, &str),
) -> Result<Claim, StoreError> {
    store
        .claim(request(key, token, now, ttl, (scope, scope_value)))
        .await
}

const HOUR: i64 = 3_600_000;

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

#[tokio::test]
async fn a_takeover_keeps_the_scope_and_a_new_claim_of_an_expired_record_writes_its_own() {
    let (store, _) = store().await;
    let scope_of = async |store: &BucketStore| {
        let record = store.read_record(&key(1)).await.unwrap().unwrap();
        (record.scope, record.scope_value, record.created_at)
    };
    let acme = ("org", "acme");
    assert_eq!(
        claim_in(&store, &key(1), 1, 0, HOUR, acme).await.unwrap(),
        ACQUIRED
    );
    // The lease lapsed; the same request takes the record over. (A real key is derived from its
    // scope, so a retry names the same one; this one names another to show which is kept.)
    let bob = ("user", "bob");
    let taken = claim_in(&store, &key(1), 2, 70_000, HOUR, bob).await;
    assert_eq!(taken.unwrap(), Claim::Acquired { took_over: true });
    assert_eq!(scope_of(&store).await, ("org".into(), "acme".into(), at(0)));
    // Expired (the takeover set a new expiry): a new claim replaces the record with its own.
    let expired = 70_000 + HOUR;
    let fresh = claim_in(&store, &key(1), 3, expired, HOUR, bob).await;
    assert_eq!(fresh.unwrap(), ACQUIRED);
    assert_eq!(
        scope_of(&store).await,
        ("user".into(), "bob".into(), at(expired))
    );
}

/// `InMemory` answers a listing in one go, without pages (its `list` collects every object
/// before it returns the stream): what pagination would cut, 1 500 records, all listed.
#[tokio::test]
async fn listings_read_every_record_under_the_prefix_and_nothing_else() {
    const RECORDS: u32 = 1_500;
    let (store, raw) = store().await;
    for i in 0..RECORDS {
        let claimed = claim(&store, &key(i), 1, i64::from(i), HOUR).await;
        assert_eq!(claimed.unwrap(), ACQUIRED);
    }
    let token = LeaseToken::from_i64(1);
    let done = |i: i64| Completion {
        payload: b"done",
        status: Some(200),
        completed_at: at(i),
        expires_at: at(i + HOUR),
    };
    for i in 0..10 {
        assert_eq!(
            store.complete(&key(i), token, done(2_000)).await.unwrap(),
            Fence::Held
        );
    }
    // Tombstones: five forgotten, five purged, ten released.
    let now = at(100_000);
    for i in 0..5 {
        let forgotten = store.forget_record(&key(i), now, false).await.unwrap();
        assert!(matches!(forgotten, Forgotten::Deleted(_)), "{forgotten:?}");
    }
    let completed = RecordFilter::new().state(RecordState::Completed);
    assert_eq!(store.purge_records(&completed, now, 100).await.unwrap(), 5);
    for i in RECORDS..RECORDS + 10 {
        assert_eq!(claim(&store, &key(i), 1, 0, HOUR).await.unwrap(), ACQUIRED);
        assert_eq!(store.release(&key(i), token).await.unwrap(), Fence::Held);
    }
    // Not records: a start-up probe, a stranger's file, a store under a longer prefix.
    for stranger in ["idem/.probe-0000000000000001", "idem/README"] {
        let path = Path::from(stranger);
        raw.put(&path, Bytes::from_static(b"x").into())
            .await
            .unwrap();
    }
    let nested = BucketStore::with_prefix(raw.clone(), "idem/nested")
        .await
        .unwrap();
    assert_eq!(claim(&nested, &key(0), 1, 0, HOUR).await.unwrap(), ACQUIRED);
    assert_eq!(objects(&raw).await, 1_512, "records, tombstones, strangers");

    let all = store
        .list_records(&RecordFilter::new(), now, u32::MAX)
        .await
        .unwrap();
    let keys: Vec<_> = all.iter().map(|r| r.key).collect();
    assert_eq!(
        keys,
        (10..RECORDS).map(key).collect::<Vec<_>>(),
        "oldest first"
    );
    // The oldest 300, though the listing keeps only a few hundred at a time.
    let oldest = store
        .list_records(&RecordFilter::new(), now, 300)
        .await
        .unwrap();
    assert_eq!(oldest[..], all[..300]);
    let stats = store.record_stats(&RecordFilter::new(), now).await.unwrap();
    assert_eq!(stats.total(RecordState::InFlight), u64::from(RECORDS) - 10);
    assert_eq!(stats.total(RecordState::Completed), 0);
    assert_eq!(stats.oldest_in_flight, Some(at(10)));
    // The tombstones read as no record, and the sweeper removes them.
    assert_eq!(store.read_record(&key(0)).await.unwrap(), None);
    assert_eq!(store.purge_expired(now, 100).await.unwrap(), 0);
    assert_eq!(objects(&raw).await, 1_492);
}

#[tokio::test]
async fn a_corrupt_record_fails_the_listing_and_names_its_object() {
    let (store, raw) = store().await;
    assert_eq!(claim(&store, &key(1), 1, 0, HOUR).await.unwrap(), ACQUIRED);
    let path = store.path(&key(2));
    raw.put(&path, Bytes::from_static(b"idem.rec\x02\x00").into())
        .await
        .unwrap();
    let listed = store.list_records(&RecordFilter::new(), at(0), 10).await;
    match listed {
        Err(StoreError::Corrupt(why)) => assert!(why.contains(&key(2).to_hex()), "{why}"),
        other => panic!("expected a corrupt record, got {other:?}"),
    }
    let read = store.read_record(&key(2)).await;
    assert!(matches!(read, Err(StoreError::Corrupt(_))), "{read:?}");
}
