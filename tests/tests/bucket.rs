//! What only `BucketStore` has: the start-up probe that refuses an object store without
//! conditional updates, purges that delete records (expired ones and tombstones) without a
//! conditional delete, racing claims, and operators' forgets and purges, which replace a record
//! by a tombstone only if it is still the version they read. (Its record rules are the
//! conformance suite's, run on `InMemory`.)
//!
//! ```text
//! cargo test -p idem-tests --test bucket
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_core::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use idem_runtime::StoreError;
use idem_runtime::clock::Timestamp;
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::records::{Forgotten, RecordFilter};
use idem_runtime::store::{
    Admin, BucketStore, Claim, ClaimRequest, Completion, Fence, LeaseToken, Store,
};
use tokio::sync::Notify;

#[tokio::test]
async fn a_store_without_conditional_updates_is_refused_at_start_up() {
    let folder = std::env::temp_dir().join(idem_tests::db::unique_name());
    std::fs::create_dir_all(&folder).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(&folder).unwrap();
    let refused = BucketStore::new(Arc::new(local)).await;
    match refused {
        Err(error @ StoreError::Config(_)) => {
            let message = error.to_string();
            assert!(message.contains("LocalFileSystem"), "{message}");
            assert!(message.contains("conditional"), "{message}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    // The probe cleaned up after itself.
    let left: Vec<_> = walk(&folder);
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(folder);
}

#[tokio::test]
async fn a_bad_prefix_is_refused() {
    let memory = Arc::new(object_store::memory::InMemory::new());
    let refused = BucketStore::with_prefix(memory, "a//b").await;
    assert!(matches!(refused, Err(StoreError::Config(_))), "{refused:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// Forwards to an in-memory object store, with races staged on its reads. Once `armed`, the
/// next read answers what it read 50 ms late: a purge that read a tombstone, then was
/// overtaken by a claim. Once [paused](Staged::pause), the next read stops (before or after
/// reading), says so on `stopped`, and goes on when the test notifies `resume`.
#[derive(Debug, Default)]
struct Staged {
    inner: object_store::memory::InMemory,
    armed: AtomicBool,
    pause: Mutex<Option<Pause>>,
    stopped: Notify,
    resume: Notify,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    BeforeRead,
    AfterRead,
}

impl Staged {
    fn pause(&self, when: Pause) {
        *self.pause.lock().unwrap() = Some(when);
    }

    async fn stop_if(&self, paused: Option<Pause>, now: Pause) {
        if paused == Some(now) {
            self.stopped.notify_one();
            self.resume.notified().await;
        }
    }
}

impl std::fmt::Display for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Staged({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Staged {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let paused = self.pause.lock().unwrap().take();
        self.stop_if(paused, Pause::BeforeRead).await;
        let got = self.inner.get_opts(location, options).await;
        self.stop_if(paused, Pause::AfterRead).await;
        if self.armed.swap(false, Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        got
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purges_racing_claims_never_delete_a_claimed_record() {
    let at = Timestamp::from_millis;
    let key =
        |round: u32| RecordKey::from_bytes(std::array::from_fn(|i| (round >> (i % 4 * 8)) as u8));
    let claim = |store: &BucketStore, k: &RecordKey, token: i64, now: i64| {
        let (store, k) = (store.clone(), *k);
        async move {
            let fingerprint = Fingerprint::from_bytes([7; 32]);
            store
                .claim(ClaimRequest {
                    key: &k,
                    fingerprint: &fingerprint,
                    token: LeaseToken::from_i64(token),
                    now: at(now),
                    lease_until: at(now + 60_000),
                    expires_at: at(now + 3_600_000),
                    operation: "op",
                    scope: "global",
                    scope_value: "",
                    tenant: 0,
                })
                .await
        }
    };
    const ACQUIRED: Claim = Claim::Acquired { took_over: false };
    for round in 0..100u32 {
        // A store of its own per round, so the purge's first read is of this round's record.
        let objects = Arc::new(Staged::default());
        let store = BucketStore::new(objects.clone()).await.unwrap();
        let k = key(round);
        // A released key: a tombstone, which the purge and the claim race for.
        assert_eq!(claim(&store, &k, 1, 0).await.unwrap(), ACQUIRED);
        let released = store.release(&k, LeaseToken::from_i64(1)).await;
        assert_eq!(released.unwrap(), Fence::Held);
        // In every other round the purge reads the tombstone, then the claim overtakes it.
        objects.armed.store(round % 2 == 0, Ordering::SeqCst);
        let purge = {
            let store = store.clone();
            tokio::spawn(async move { store.purge_expired(at(10), u32::MAX).await })
        };
        if round % 2 == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let claimed = claim(&store, &k, 2, 10).await;
        purge.await.unwrap().unwrap();
        match claimed {
            // The claim won: its record must still be there, owned by it.
            Ok(Claim::Acquired { .. }) => {
                let held = store.renew(&k, LeaseToken::from_i64(2), at(20_000)).await;
                assert_eq!(held.unwrap(), Fence::Held, "round {round}");
            }
            // The claim met the purge's mark and refused: nothing was written.
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("round {round}: {other:?}"),
        }
    }
}

const NOW: i64 = 100_000;

/// A store of its own, so a listing's first read is of the test's record, and the record `k`
/// claimed at 0 (live for `ttl` ms), completed at 1 s when `complete`.
async fn staged(k: &RecordKey, ttl: i64, complete: bool) -> (Arc<Staged>, BucketStore) {
    let objects = Arc::new(Staged::default());
    let store = BucketStore::new(objects.clone()).await.unwrap();
    let fingerprint = Fingerprint::from_bytes([7; 32]);
    let claimed = store
        .claim(request(k, &fingerprint, 1, 0, ttl))
        .await
        .unwrap();
    assert_eq!(claimed, Claim::Acquired { took_over: false });
    if complete {
        let completion = Completion {
            payload: b"done",
            status: Some(201),
            completed_at: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(1_000 + ttl),
        };
        let held = store.complete(k, LeaseToken::from_i64(1), completion).await;
        assert_eq!(held.unwrap(), Fence::Held);
    }
    (objects, store)
}

fn request<'a>(
    k: &'a RecordKey,
    fingerprint: &'a Fingerprint,
    token: i64,
    now: i64,
    ttl: i64,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key: k,
        fingerprint,
        token: LeaseToken::from_i64(token),
        now: Timestamp::from_millis(now),
        lease_until: Timestamp::from_millis(now + 60_000),
        expires_at: Timestamp::from_millis(now + ttl),
        operation: "op",
        scope: "org",
        scope_value: "acme",
        tenant: 0,
    }
}

#[tokio::test]
async fn two_forgets_of_one_record_delete_it_once() {
    let k = RecordKey::from_bytes([1; 32]);
    let (objects, store) = staged(&k, 3_600_000, true).await;
    let now = Timestamp::from_millis(NOW);
    objects.pause(Pause::AfterRead);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.forget_record(&k, now, false).await })
    };
    objects.stopped.notified().await;
    // The second forget runs while the first holds what it read.
    let second = store.forget_record(&k, now, false).await.unwrap();
    assert!(matches!(second, Forgotten::Deleted(_)), "{second:?}");
    objects.resume.notify_one();
    // The first one's swap finds the record changed, re-reads it: gone.
    assert_eq!(first.await.unwrap().unwrap(), Forgotten::Absent);
}

#[tokio::test]
async fn a_forget_overtaken_by_a_claim_leaves_the_new_owner_alone() {
    let k = RecordKey::from_bytes([2; 32]);
    // Expired at 50 s: a forget reads it, then a new request claims the key.
    let (objects, store) = staged(&k, 50_000, false).await;
    let now = Timestamp::from_millis(NOW);
    objects.pause(Pause::AfterRead);
    let forget = {
        let store = store.clone();
        tokio::spawn(async move { store.forget_record(&k, now, false).await })
    };
    objects.stopped.notified().await;
    let fingerprint = Fingerprint::from_bytes([8; 32]);
    let claimed = store.claim(request(&k, &fingerprint, 2, NOW, 3_600_000));
    assert_eq!(claimed.await.unwrap(), Claim::Acquired { took_over: false });
    objects.resume.notify_one();
    match forget.await.unwrap().unwrap() {
        Forgotten::Leased(record) => assert_eq!(record.created_at, now),
        other => panic!("the new owner's record must be refused, got {other:?}"),
    }
    let renewed = store.renew(
        &k,
        LeaseToken::from_i64(2),
        now.after(Duration::from_secs(90)),
    );
    assert_eq!(renewed.await.unwrap(), Fence::Held);
}

#[tokio::test]
async fn two_purges_count_a_record_once() {
    let k = RecordKey::from_bytes([3; 32]);
    let (objects, store) = staged(&k, 3_600_000, true).await;
    let now = Timestamp::from_millis(NOW);
    objects.pause(Pause::AfterRead);
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.purge_records(&RecordFilter::new(), now, 10).await })
    };
    objects.stopped.notified().await;
    let second = store.purge_records(&RecordFilter::new(), now, 10).await;
    assert_eq!(second.unwrap(), 1);
    objects.resume.notify_one();
    assert_eq!(
        first.await.unwrap().unwrap(),
        0,
        "its swap lost: not counted"
    );
    assert_eq!(store.read_record(&k).await.unwrap(), None);
}

#[tokio::test]
async fn a_record_deleted_between_the_listing_and_its_read_is_left_out() {
    let k = RecordKey::from_bytes([4; 32]);
    let (objects, store) = staged(&k, 3_600_000, true).await;
    let now = Timestamp::from_millis(NOW);
    objects.pause(Pause::BeforeRead);
    let listing = {
        let store = store.clone();
        tokio::spawn(async move { store.list_records(&RecordFilter::new(), now, 10).await })
    };
    objects.stopped.notified().await;
    let path = Path::from(format!("idem/{}", k.to_hex()));
    objects.inner.delete(&path).await.unwrap();
    objects.resume.notify_one();
    assert_eq!(listing.await.unwrap().unwrap(), []);
}
