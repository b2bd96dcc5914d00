//! The store keeps the contract: every case of the conformance suite the built-in stores run,
//! each on a fresh store.

use idem_core::testing::conformance;
use idem_own_store::MapStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_the_store_contract() {
    let report = conformance::run_all(|| async { MapStore::new() }).await;
    // No payload limit of its own: every case ran, none was skipped.
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(report.passed.len(), conformance::CASES.len());
}
