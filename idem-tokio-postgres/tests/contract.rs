//! The store keeps idem's store contract: idem-core's published conformance, model and fault
//! suites, one call each, every case on a store in a fresh schema of the real server.

mod support;

use idem_core::testing::{conformance, faults, model};
use support::Schemas;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_the_store_contract() {
    let schemas = Schemas::default();
    let report = conformance::run_all(|| schemas.store()).await;
    assert!(report.skipped.is_empty(), "{report:?}");
    assert_eq!(report.passed.len(), conformance::CASES.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_its_promises_when_the_store_fails() {
    let schemas = Schemas::default();
    let report = faults::run_all(|| schemas.store()).await;
    assert_eq!(report.passed, faults::CASES, "{report:?}");
}

#[test]
fn agrees_with_the_model() {
    let schemas = Schemas::default();
    let report = model::check(|| schemas.store(), 256);
    assert!(report.cases > 0, "{report:?}");
}
