//! The store agrees with the reference model: random sequences of claim, complete, release,
//! renew and purge over a few keys and a moving clock, answer for answer, the model-based test
//! every built-in store runs. `PROPTEST_CASES=5000 cargo test -p idem-own-store` runs longer.

use idem_core::testing::model;
use idem_own_store::MapStore;

// A plain `#[test]`: the model drives the store on a Tokio runtime of its own.
#[test]
fn agrees_with_the_model() {
    let report = model::check(|| async { MapStore::new() }, 512);
    assert!(report.cases > 0, "{report:?}");
}
