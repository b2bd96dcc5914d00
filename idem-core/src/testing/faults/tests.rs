//! The suite itself and its wrapper: the reference store passes every case, and [`Faulty`]
//! fails, stalls and counts what it is told to and passes on only what keeps calls in its path.

use std::time::Duration;

use super::*;
use crate::store::{Claim, LeaseToken, MemoryStore};
use crate::testing::conformance::tests::Altered;
use crate::testing::{capabilities_of, key, request};

#[tokio::test]
async fn the_memory_store_passes_every_case() {
    let report = run_all(|| async { MemoryStore::new() }).await;
    assert_eq!(report.passed, CASES);
    assert!(case::<MemoryStore>("a_failed_claim_runs_nothing").is_some());
    assert!(case::<MemoryStore>("no_such_case").is_none());
}

#[tokio::test]
async fn faults_hit_the_calls_they_name_as_often_as_told() {
    let store = Faulty::new(MemoryStore::new());
    let faults = store.faults().clone();
    let k = key(1);
    faults.inject_next(Call::Claim, Fault::Blink, 2);
    for _ in 0..2 {
        assert!(
            store
                .claim(request(&k, 1, 0, 60_000, ("s", "v")))
                .await
                .is_err()
        );
    }
    let claimed = store.claim(request(&k, 1, 0, 60_000, ("s", "v"))).await;
    assert!(claimed.is_ok(), "{claimed:?}");
    assert_eq!(
        (faults.calls(Call::Claim), faults.faulted(Call::Claim)),
        (3, 2)
    );
    // A lost reply: the release happened, its caller was told it failed.
    faults.inject(Call::Release, Fault::LoseReply);
    assert!(store.release(&k, LeaseToken::from_i64(1)).await.is_err());
    faults.heal(Call::Release);
    let again = store.claim(request(&k, 2, 1, 60_000, ("s", "v"))).await;
    assert_eq!(again.unwrap(), Claim::Acquired { took_over: false });
    assert_eq!(faults.all_calls(), 5);
}

#[tokio::test]
async fn a_stalled_call_goes_through_when_healed_and_never_if_dropped() {
    let store = Faulty::new(MemoryStore::new());
    let faults = store.faults().clone();
    let k = key(1);
    faults.inject(Call::Claim, Fault::Stall);
    let dropped = store.claim(request(&k, 1, 0, 60_000, ("s", "v")));
    assert!(
        tokio::time::timeout(Duration::from_millis(20), dropped)
            .await
            .is_err()
    );
    assert_eq!(faults.stalled(), 0, "a dropped call is no longer stalled");
    let stalled = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .claim(request(&key(1), 2, 0, 60_000, ("s", "v")))
                .await
        }
    });
    while faults.stalled() == 0 {
        tokio::task::yield_now().await;
    }
    faults.heal(Call::Claim);
    let claimed = stalled.await.unwrap().unwrap();
    // The dropped claim never reached the store: the healed one found the key free.
    assert_eq!(claimed, Claim::Acquired { took_over: false });
}

#[test]
fn the_wrapper_passes_on_limits_and_expiry_and_nothing_that_goes_around_it() {
    let memory = capabilities_of(MemoryStore::new());
    assert!(memory.reads_in_process().is_some() && memory.admin().is_some());
    let wrapped = capabilities_of(Faulty::new(MemoryStore::new()));
    assert!(
        wrapped.reads_in_process().is_none(),
        "reads would skip the faults"
    );
    assert!(wrapped.admin().is_none() && !wrapped.lends_transactions());
    assert!(wrapped.needs_sweeping());
    let limited = Altered {
        payload_limit: Some(1000),
        expires_by_itself: true,
        ..Altered::default()
    };
    let limited = capabilities_of(Faulty::new(limited));
    assert_eq!(limited.payload_limit(), Some(1000));
    assert!(!limited.needs_sweeping());
}

/// A store whose claims never refuse runs the operation for several callers at once: the
/// flapping case fails, naming the second run.
#[tokio::test]
async fn a_store_that_claims_held_records_fails() {
    let unsafe_store = Altered {
        claims_held_records: true,
        ..Altered::default()
    };
    let case = case::<Altered>("concurrent_attempts_while_the_store_flaps_run_once").unwrap();
    let failure = tokio::spawn(case.run(unsafe_store))
        .await
        .expect_err("a store that claims held records must fail the case")
        .into_panic();
    let message = crate::testing::message(&*failure);
    assert!(
        message.contains("second run") || message.contains("more than once"),
        "{message}"
    );
}
