//! The store conformance suite: every case a [`Store`] must pass to keep the contract the engine
//! relies on. Every built-in store runs it (`tests/tests/conformance.rs` in the repository);
//! a store written elsewhere runs all of it with one call:
//!
//! ```
//! use idem_core::store::MemoryStore;
//! use idem_core::testing::conformance;
//!
//! // In a `#[tokio::test]` of the store's crate, with its own store in place of this one:
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let report = conformance::run_all(|| async { MemoryStore::new() }).await;
//! assert!(report.skipped.is_empty());
//! # }
//! ```
//!
//! Each case is also a function of its own (`claim_complete_replay(store)`, …), for a test per
//! case, so that a failure is named by the test runner: see [`cases`] and [`ConformanceCase::run`], or
//! call the functions directly.
//!
//! Every case starts from an empty store and uses fixed, explicit
//! [`Timestamp`](crate::clock::Timestamp)s (no sleeps, no timing assertions), so a store's
//! clock plays no part. Payloads are opaque bytes, as the store contract says: the suite never
//! encodes an HTTP response or any face's output. [`MemoryStore`](crate::store::MemoryStore)
//! is the reference and passes every case.
//!
//! A store with a payload limit of its own
//! ([`Capabilities::limit_payload`](crate::store::Capabilities::limit_payload), DynamoDB's item
//! size) skips the cases that store more than it keeps: [`ConformanceCase::largest_payload`] says how much
//! each case stores, and [`run_all`] reports what it skipped.

use std::future::Future;

use crate::store::{Admin, BoxFuture, Store};

mod bulk;
mod lifecycle;
mod records;
mod support;

pub use bulk::{
    binary_payloads_round_trip_exactly, concurrent_claimers_one_acquires,
    concurrent_takeover_one_wins, large_payloads_round_trip_exactly,
    purge_is_bounded_and_takes_only_expired_records,
};
pub use lifecycle::{
    claim_complete_replay, completed_records_are_never_taken_over, completion_sets_the_expiry,
    displaced_owner_is_fenced_out, expired_records_are_invisible,
    fenced_writes_need_the_token_and_a_record, fingerprint_mismatch_once_completed,
    fingerprint_mismatch_while_in_flight, in_flight_duplicates_are_reported, keys_are_independent,
    lapsed_lease_is_taken_over_by_the_same_request, released_record_is_claimable_again,
    renew_extends_the_lease,
};
pub use records::{
    a_record_is_read_with_its_payload, filters_select_by_operation_state_scope_and_age,
    forced_forget_fences_the_owner_out, forget_refuses_a_live_owner_and_deletes_the_rest,
    purge_takes_completed_records_of_one_window, records_list_what_operators_read,
    stats_count_by_operation_and_state,
};

/// The largest payload a case stores unless it says otherwise: 1 KiB.
pub const SMALL_PAYLOAD: usize = 1 << 10;

/// The largest payload [`large_payloads_round_trip_exactly`] stores: 8 MiB.
pub const LARGE_PAYLOAD: usize = 8 << 20;

/// One case of the suite, runnable on a store of type `S`.
pub struct ConformanceCase<S> {
    /// The case's name: the name of its function in this module.
    pub name: &'static str,
    /// The largest payload the case stores, in bytes. A store whose payload limit
    /// ([`Capabilities::payload_limit`](crate::store::Capabilities::payload_limit)) is below it
    /// cannot run the case.
    pub largest_payload: usize,
    run: fn(S) -> BoxFuture<'static, ()>,
}

impl<S: Store + Clone> ConformanceCase<S> {
    /// The case, run on `store`, which must hold no records. The future panics, with the
    /// failing assertion's message, when the store breaks the contract.
    pub fn run(&self, store: S) -> BoxFuture<'static, ()> {
        (self.run)(store)
    }

    /// Whether a store with `payload_limit` (see [`payload_limit`]) keeps every payload the case
    /// stores.
    pub fn fits(&self, payload_limit: Option<usize>) -> bool {
        payload_limit.is_none_or(|limit| self.largest_payload <= limit)
    }
}

impl<S> std::fmt::Debug for ConformanceCase<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConformanceCase")
            .field("name", &self.name)
            .field("largest_payload", &self.largest_payload)
            .finish_non_exhaustive()
    }
}

/// Declares the suite once: [`CASES`] and [`cases`] list the same functions in the same order.
macro_rules! suite {
    ($($case:ident $(up to $payload:expr)?),+ $(,)?) => {
        /// The name of every case, in the order [`run_all`] runs them: lifecycle, bulk, then
        /// operators' records.
        pub const CASES: &[&str] = &[$(stringify!($case)),+];

        /// Every case of the suite for stores of type `S`, in the order of [`CASES`].
        pub fn cases<S: Store + Admin + Clone>() -> Vec<ConformanceCase<S>> {
            vec![$(
                ConformanceCase {
                    name: stringify!($case),
                    largest_payload: suite!(@payload $($payload)?),
                    run: |store| Box::pin($case(store)),
                }
            ),+]
        }
    };
    (@payload) => { SMALL_PAYLOAD };
    (@payload $payload:expr) => { $payload };
}

suite! {
    claim_complete_replay,
    completed_records_are_never_taken_over,
    in_flight_duplicates_are_reported,
    fingerprint_mismatch_while_in_flight,
    fingerprint_mismatch_once_completed,
    lapsed_lease_is_taken_over_by_the_same_request,
    renew_extends_the_lease,
    displaced_owner_is_fenced_out,
    fenced_writes_need_the_token_and_a_record,
    expired_records_are_invisible,
    completion_sets_the_expiry,
    released_record_is_claimable_again,
    keys_are_independent,
    purge_is_bounded_and_takes_only_expired_records,
    concurrent_claimers_one_acquires,
    concurrent_takeover_one_wins,
    large_payloads_round_trip_exactly up to LARGE_PAYLOAD,
    binary_payloads_round_trip_exactly,
    records_list_what_operators_read,
    filters_select_by_operation_state_scope_and_age,
    a_record_is_read_with_its_payload,
    forget_refuses_a_live_owner_and_deletes_the_rest,
    forced_forget_fences_the_owner_out,
    purge_takes_completed_records_of_one_window,
    stats_count_by_operation_and_state,
}

/// The case named `name`, if the suite has one.
pub fn case<S: Store + Admin + Clone>(name: &str) -> Option<ConformanceCase<S>> {
    cases().into_iter().find(|case| case.name == name)
}

/// The largest payload `store` keeps, as it offers it from [`Store::offer_capabilities`]
/// ([`Capabilities::limit_payload`](crate::store::Capabilities::limit_payload)); `None` when it
/// has no limit of its own.
pub fn payload_limit<S: Store + Clone>(store: &S) -> Option<usize> {
    super::capabilities_of(store.clone()).payload_limit()
}

/// What [`run_all`] did when every case it ran passed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConformanceReport {
    /// The cases that ran and passed, in order.
    pub passed: Vec<&'static str>,
    /// The cases not run because they store payloads larger than the store's payload limit.
    pub skipped: Vec<&'static str>,
}

/// Runs every case of the suite ([`CASES`], in that order), each on a fresh store from `fresh`,
/// one after another, and returns what ran and what was skipped.
///
/// `fresh` must make a store that shares no records with any store it made before (a new
/// in-memory store, a new schema, table or key prefix). The stores are dropped after their case;
/// to delete what they leave in a server, iterate [`cases`] and call [`ConformanceCase::run`] yourself, as
/// the repository's own conformance tests do.
///
/// A case whose [`largest_payload`](ConformanceCase::largest_payload) exceeds the store's
/// [`payload_limit`] is skipped (and named in [`ConformanceReport::skipped`]), so a store with an item-size
/// limit such as DynamoDB's runs every other case.
///
/// Call it inside a Tokio runtime: the concurrency cases spawn tasks, and a multi-threaded
/// runtime makes their claims truly concurrent.
///
/// # Panics
/// When any case fails, after running all of them: the message names every failing case and
/// what it asserted. A store that cannot be made panics from `fresh` itself.
pub async fn run_all<S, F, Fut>(mut fresh: F) -> ConformanceReport
where
    S: Store + Admin + Clone,
    F: FnMut() -> Fut,
    Fut: Future<Output = S>,
{
    let mut report = ConformanceReport::default();
    let mut failures = Vec::new();
    for case in cases::<S>() {
        let store = fresh().await;
        if !case.fits(payload_limit(&store)) {
            report.skipped.push(case.name);
            continue;
        }
        match super::catch_unwind(case.run(store)).await {
            Ok(()) => report.passed.push(case.name),
            Err(panic) => failures.push(format!("`{}`: {}", case.name, super::message(&*panic))),
        }
    }
    if !failures.is_empty() {
        let ran = CASES.len() - report.skipped.len();
        panic!(
            "the store failed {} of {ran} conformance cases \
             (idem_core::testing::conformance::<case>):\n  {}",
            failures.len(),
            failures.join("\n  ")
        );
    }
    report
}

#[cfg(test)]
pub(crate) mod tests;
