//! What only `BucketStore` has: the start-up probe that refuses an object store without
//! conditional updates, and purges that delete records (expired ones and tombstones) without a
//! conditional delete, racing claims. (Its record rules are the conformance suite's, run on
//! `InMemory`.)
//!
//! ```text
//! cargo test -p idem-tests --test bucket
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures_core::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use idem_runtime::clock::Timestamp;
use idem_runtime::store::{BucketStore, Claim, ClaimRequest, Fence, LeaseToken, Store};
use idem_runtime::{Fingerprint, RecordKey, StoreError};

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

/// Forwards to an object store; the next read, once armed, answers what it read 50 ms late: a
/// purge that read a tombstone, then was overtaken by a claim.
#[derive(Debug)]
struct SlowRead {
    inner: object_store::memory::InMemory,
    armed: AtomicBool,
}

impl std::fmt::Display for SlowRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlowRead({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for SlowRead {
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
        let got = self.inner.get_opts(location, options).await;
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
        let objects = Arc::new(SlowRead {
            inner: object_store::memory::InMemory::new(),
            armed: AtomicBool::new(false),
        });
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
