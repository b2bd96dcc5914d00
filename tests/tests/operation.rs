//! The programmatic API (`Idempotency::operation`): every case in [`cases`] runs against every
//! store, on a store of its own, like the conformance suite. [`atomic`] holds atomic mode on the
//! SQL stores (rows counted in a real table) and what only one backend can show (an outage).
//! Leases and TTLs move with a `ManualClock`; in-flight states are held with a `Gate`.
//!
//! ```text
//! cargo test -p idem-tests --test operation
//! ```

#[path = "operation/atomic.rs"]
mod atomic;
#[path = "operation/cases.rs"]
mod cases;

use std::future::Future;

use idem_tests::TestStore;

/// Runs `case` on a fresh store of `S` and discards the store afterwards, even if the case
/// panicked (the panic is then resumed).
async fn run<S, F>(case: impl FnOnce(S) -> F)
where
    S: TestStore,
    F: Future<Output = ()> + Send + 'static,
{
    let store = S::fresh().await;
    let outcome = tokio::spawn(case(store.clone())).await;
    store.discard().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// Every case, against one backend.
macro_rules! backend {
    ($backend:ident: $store:ty; $($case:ident),+ $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    crate::run(crate::cases::$case::<$store>).await;
                }
            )+
        }
    };
}

macro_rules! every_backend {
    ($($backend:ident: $store:ty),+ $(,)?) => {
        $(
            backend! { $backend: $store;
                fresh_then_replayed_with_the_same_output,
                a_different_input_is_a_conflict,
                input_field_order_does_not_matter,
                an_in_flight_duplicate_is_refused,
                a_waiting_duplicate_gets_the_output,
                an_error_releases_the_key,
                a_panic_releases_the_key,
                a_lapsed_lease_is_taken_over,
                an_expired_record_runs_again,
                scopes_and_operations_isolate,
                an_output_of_another_type_is_corrupt,
                an_invalid_key_is_refused_before_the_store,
            }
        )+
    };
}

every_backend! {
    memory: idem_runtime::store::MemoryStore,
    sqlite: idem_runtime::store::SqliteStore,
    postgres: idem_runtime::store::PostgresStore,
    object: idem_runtime::store::BucketStore,
    redis: idem_runtime::store::RedisStore,
}
