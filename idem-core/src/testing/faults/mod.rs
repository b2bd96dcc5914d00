//! The fault suite: what a store's users rely on when the store fails, checked through the real
//! engine. Each case builds an engine ([`Idempotency`](crate::idempotency::Idempotency)) on the
//! store behind [`Faulty`], a wrapper that makes chosen calls blink, lose their replies or
//! stall, and runs an operation through the programmatic API
//! ([`Operation::run`](crate::operation::Operation::run)) while it does: no operation runs
//! twice, a failing store fails closed, and the engine recovers by itself once it answers.
//! Every built-in store runs it (`tests/tests/store_faults.rs` in the repository); a store
//! written elsewhere runs all of it with one call:
//!
//! ```no_run
//! use idem_core::store::MemoryStore;
//! use idem_core::testing::faults;
//!
//! // In a `#[tokio::test]` of the store's crate, with its own store in place of this one:
//! # #[tokio::main]
//! # async fn main() {
//! let report = faults::run_all(|| async { MemoryStore::new() }).await;
//! assert_eq!(report.passed.len(), faults::CASES.len());
//! # }
//! ```
//!
//! | case | the fault | what holds |
//! |---|---|---|
//! | [`a_failed_claim_runs_nothing`] | claims fail | the operation does not run, the caller gets [`OperationError::Unavailable`](crate::operation::OperationError::Unavailable); once the store is back it runs once |
//! | [`a_claim_whose_reply_is_lost_is_released`] | a claim lands, its reply is lost | refused as above; the landed claim is released, so the key frees at once, not after the lease |
//! | [`a_stalled_store_fails_closed_within_the_store_timeout`] | every call stalls | refused within the store timeout; once the store answers, the key runs once |
//! | [`concurrent_attempts_while_the_store_flaps_run_once`] | 16 callers of one key; calls fail and lose replies by turns | one run; every caller gets its output or a retryable refusal, then the output |
//! | [`a_completion_lost_to_a_blink_lands_later`] | completions fail | the caller gets its output; duplicates are refused in flight; the completion lands in the background and retries replay it |
//! | [`a_completion_whose_reply_is_lost_replays_the_first_output`] | a completion lands, its reply is lost | retries replay the first output |
//! | [`a_stalled_completion_lands_once_the_store_answers`] | completions stall | the caller gets its output at the store timeout; the completion lands when the store answers |
//! | [`a_release_lost_to_a_blink_frees_the_key_once_the_store_is_back`] | a failed operation's release fails | the key frees once the store is back, and a retry runs again, once |
//! | [`a_renewal_lost_to_a_blink_keeps_the_lease`] | one renewal of a long operation fails | nobody takes the record over; one run |
//! | [`an_owner_cut_off_past_its_lease_is_told_it_lost_it`] | every renewal fails past the lease | a retry takes over (as after a crash); the first owner gets [`OperationError::LeaseLost`](crate::operation::OperationError::LeaseLost), its output not stored |
//!
//! The cases run in real time (a store on a server cannot follow Tokio's paused clock), with
//! leases and timeouts of a few hundred milliseconds to a few seconds: the whole suite takes
//! about ten seconds. Its two bounds on how long a call may take (a stalled store must be
//! answered within ten times its store timeout) are generous, for machines under load; every
//! other wait is for something to happen, bounded only so that a failure does not hang. Each
//! case has keys of its own and starts from the store `fresh` makes.
//!
//! Every case runs on every store: none depends on a capability a store may lack. [`Faulty`]
//! passes on the wrapped store's payload limit and expiry by itself, and offers neither reads
//! in process nor transactions (they would reach the store around the faults): the suite
//! checks plain mode. Each case is also a function of its own, for a test per case, so that a
//! failure is named by the test runner: see [`cases`] and [`FaultCase::run`], or call the functions
//! directly.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::{BoxFuture, Store};

mod claims;
mod faulty;
mod leases;
mod rig;
mod writes;

pub use claims::{
    a_claim_whose_reply_is_lost_is_released, a_failed_claim_runs_nothing,
    a_stalled_store_fails_closed_within_the_store_timeout,
    concurrent_attempts_while_the_store_flaps_run_once,
};
pub use faulty::{Call, Fault, Faults, Faulty};
pub use leases::{
    a_renewal_lost_to_a_blink_keeps_the_lease, an_owner_cut_off_past_its_lease_is_told_it_lost_it,
};
pub use writes::{
    a_completion_lost_to_a_blink_lands_later,
    a_completion_whose_reply_is_lost_replays_the_first_output,
    a_release_lost_to_a_blink_frees_the_key_once_the_store_is_back,
    a_stalled_completion_lands_once_the_store_answers,
};

/// How long one case may run before it fails as hung: several times the longest case.
pub const CASE_LIMIT: Duration = Duration::from_secs(60);

/// One case of the suite, runnable on a store of type `S`.
pub struct FaultCase<S> {
    /// The case's name: the name of its function in this module.
    pub name: &'static str,
    run: fn(S) -> BoxFuture<'static, ()>,
}

impl<S: Store> FaultCase<S> {
    /// The case, run on `store`, which must hold no records. The future panics, with the
    /// failing assertion's message, when the engine on the store breaks what the case checks,
    /// or when the case runs longer than [`CASE_LIMIT`].
    pub fn run(&self, store: S) -> BoxFuture<'static, ()> {
        let case = (self.run)(store);
        let name = self.name;
        Box::pin(async move {
            if tokio::time::timeout(CASE_LIMIT, case).await.is_err() {
                panic!("`{name}` did not finish within {CASE_LIMIT:?}: it hangs");
            }
        })
    }
}

impl<S> std::fmt::Debug for FaultCase<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultCase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Declares the suite once: [`CASES`] and [`cases`] list the same functions in the same order.
macro_rules! suite {
    ($($case:ident),+ $(,)?) => {
        /// The name of every case, in the order [`run_all`] runs them: claims, writes, leases.
        pub const CASES: &[&str] = &[$(stringify!($case)),+];

        /// Every case of the suite for stores of type `S`, in the order of [`CASES`].
        pub fn cases<S: Store>() -> Vec<FaultCase<S>> {
            vec![$(
                FaultCase { name: stringify!($case), run: |store| Box::pin($case(store)) }
            ),+]
        }
    };
}

suite! {
    a_failed_claim_runs_nothing,
    a_claim_whose_reply_is_lost_is_released,
    a_stalled_store_fails_closed_within_the_store_timeout,
    concurrent_attempts_while_the_store_flaps_run_once,
    a_completion_lost_to_a_blink_lands_later,
    a_completion_whose_reply_is_lost_replays_the_first_output,
    a_stalled_completion_lands_once_the_store_answers,
    a_release_lost_to_a_blink_frees_the_key_once_the_store_is_back,
    a_renewal_lost_to_a_blink_keeps_the_lease,
    an_owner_cut_off_past_its_lease_is_told_it_lost_it,
}

/// The case named `name`, if the suite has one.
pub fn case<S: Store>(name: &str) -> Option<FaultCase<S>> {
    cases().into_iter().find(|case| case.name == name)
}

/// What [`run_all`] did when every case passed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultReport {
    /// The cases that ran and passed, in order: every case of [`CASES`].
    pub passed: Vec<&'static str>,
    /// How long they took together.
    pub elapsed: Duration,
}

/// Runs every case of the suite ([`CASES`], in that order), each on a fresh store from `fresh`,
/// one after another, and returns what passed.
///
/// `fresh` must make a store that shares no records with any store it made before (a new
/// in-memory store, a new schema, table or key prefix). The stores are dropped after their case;
/// to delete what they leave in a server, iterate [`cases`] and call [`FaultCase::run`] yourself, as
/// the repository's own tests do.
///
/// Call it inside a Tokio runtime with its time driver (`#[tokio::test]`); the engine and the
/// flapping case spawn tasks, and a multi-threaded runtime makes them truly concurrent.
///
/// # Panics
/// When any case fails, after running all of them: the message names every failing case and
/// what it asserted. A store that cannot be made panics from `fresh` itself.
pub async fn run_all<S, F, Fut>(mut fresh: F) -> FaultReport
where
    S: Store,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    let started = Instant::now();
    let mut report = FaultReport::default();
    let mut failures = Vec::new();
    for case in cases::<S>() {
        let store = fresh().await;
        match super::catch_unwind(case.run(store)).await {
            Ok(()) => report.passed.push(case.name),
            Err(panic) => failures.push(format!("`{}`: {}", case.name, super::message(&*panic))),
        }
    }
    if !failures.is_empty() {
        panic!(
            "the store failed {} of {} fault cases (idem_core::testing::faults::<case>):\n  {}",
            failures.len(),
            CASES.len(),
            failures.join("\n  ")
        );
    }
    report.elapsed = started.elapsed();
    report
}

#[cfg(test)]
mod tests;
