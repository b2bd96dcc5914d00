//! What only `BucketStore` has: the start-up probe that refuses an object store without
//! conditional updates. (Its record rules are the conformance suite's, run on `InMemory`.)
//!
//! ```text
//! cargo test -p idem-tests --test bucket
//! ```

use std::sync::Arc;

use idem_runtime::StoreError;
use idem_runtime::store::BucketStore;

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
