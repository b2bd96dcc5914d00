//! The model itself: the reference store agrees with it, a store that draws the expiry boundary
//! on the wrong side fails with a short sequence, and that sequence replays.

use super::*;
use crate::error::StoreError;
use crate::store::{Claim, Fence, MemoryStore};

/// The memory store, except that its claims see records and leases that end exactly at `now`
/// as still there (`<` where the contract says `<=`).
#[derive(Clone, Default)]
struct Late(MemoryStore);

impl Store for Late {
    async fn claim(&self, request: ClaimRequest<'_>) -> Result<Claim, StoreError> {
        let now = Timestamp::from_millis(request.now.as_millis() - 1);
        self.0.claim(ClaimRequest { now, ..request }).await
    }

    async fn complete(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        completion: Completion<'_>,
    ) -> Result<Fence, StoreError> {
        self.0.complete(key, token, completion).await
    }

    async fn release(&self, key: &RecordKey, token: LeaseToken) -> Result<Fence, StoreError> {
        self.0.release(key, token).await
    }

    async fn renew(
        &self,
        key: &RecordKey,
        token: LeaseToken,
        lease_until: Timestamp,
    ) -> Result<Fence, StoreError> {
        self.0.renew(key, token, lease_until).await
    }

    async fn purge_expired(&self, now: Timestamp, limit: u32) -> Result<u64, StoreError> {
        self.0.purge_expired(now, limit).await
    }
}

/// `cases` cases exactly, from a fixed seed: the same sequences on every run.
fn fixed(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x1de2),
        ..Config::default()
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

#[test]
fn the_memory_store_agrees_with_the_model() {
    let report = check(|| async { MemoryStore::new() }, 64);
    assert!(report.cases > 0 && report.steps >= u64::from(report.cases));
}

#[test]
fn the_count_is_the_configured_one() {
    let report = run_with(&runtime(), &MemoryStore::new(), fixed(16)).expect("the reference store");
    assert_eq!(report.cases, 16);
}

#[test]
fn a_wrong_boundary_fails_with_a_short_sequence_that_replays() {
    let runtime = runtime();
    let failure = run_with(&runtime, &Late::default(), fixed(256)).expect_err("a wrong boundary");
    assert!(failure.message.contains("the store answered"), "{failure}");
    // Shrunk (from a fixed seed, so the same every run) to a claim, the clock moving to the end
    // of its lease or life, and a second claim.
    assert!(failure.steps.len() <= 4, "{failure}");
    assert!(
        failure.to_string().contains("failing sequence"),
        "{failure}"
    );
    let again = runtime.block_on(replay(&Late::default(), &failure.steps));
    assert!(again.is_err(), "{failure}");
    runtime
        .block_on(replay(&MemoryStore::new(), &failure.steps))
        .expect("the reference store");
}

#[test]
fn a_written_sequence_replays() {
    use Step::*;
    use Who::*;
    let steps = [
        Claim {
            key: 0,
            fp: 0,
            lease: 500,
            ttl: 1_000,
        },
        Advance { ms: 500 },
        Claim {
            key: 0,
            fp: 0,
            lease: 500,
            ttl: 1_000,
        },
        Complete {
            key: 0,
            who: Earlier(0),
            payload: 1,
            ttl: 500,
        },
        Release {
            key: 0,
            who: Stranger,
        },
        Renew {
            key: 0,
            who: Latest,
            lease: 500,
        },
        Purge { limit: 1 },
    ];
    let runtime = runtime();
    runtime
        .block_on(replay(&MemoryStore::new(), &steps))
        .expect("the reference store");
    let failure = runtime
        .block_on(replay(&Late::default(), &steps))
        .expect_err("a takeover at the lease's end");
    assert!(failure.message.starts_with("step 2 "), "{failure}");

    let stray = [Release {
        key: KEYS,
        who: Latest,
    }];
    let failure = runtime
        .block_on(replay(&MemoryStore::new(), &stray))
        .expect_err("no such key");
    assert!(failure.message.contains("no key 3"), "{failure}");
}

#[tokio::test]
#[should_panic(expected = "runs a Tokio runtime of its own")]
async fn check_refuses_to_run_inside_a_runtime() {
    check(|| async { MemoryStore::new() }, 1);
}
