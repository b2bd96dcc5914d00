//! The engine keeps its promises on the store when the store fails: every case of the fault
//! suite the built-in stores run (claims that fail, lose their replies or stall; completions and
//! releases lost to a blink; renewals that fail; many callers of one key while the store flaps),
//! each on a fresh store, through the real engine.

use idem_core::testing::faults;
use idem_own_store::MapStore;

// Real time (a store on a server cannot follow a paused clock): about ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keeps_its_promises_when_the_store_fails() {
    let report = faults::run_all(|| async { MapStore::new() }).await;
    assert_eq!(report.passed, faults::CASES, "{report:?}");
}
