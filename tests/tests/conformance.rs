//! The store conformance suite: every case in [`lifecycle`] and [`bulk`] runs against every
//! backend, each test on a store of its own (a PostgreSQL schema, a SQLite file, a Redis key
//! prefix, a DynamoDB table on the moto server CI starts), so they run in parallel. Redis runs
//! twice: on the shared server, and on a one-node Redis Cluster this process starts.
//! `MemoryStore` is the reference; the others must behave exactly like it. Times are explicit
//! `Timestamp`s: no sleeps, no timing assertions.
//!
//! A new backend is one `impl TestStore` in `tests/src/` and one `backend!` line below.
//! [`records`] is what operators do with records (the `idem` command's store calls).
//! [`sql`] holds what only the SQL stores have: migrations, connection settings; [`operators`]
//! the upgrade from the first release's schema and the operator queries the README documents.
//!
//! ```text
//! cargo test -p idem-tests --test conformance
//! ```

#[path = "conformance/bulk.rs"]
mod bulk;
#[path = "conformance/lifecycle.rs"]
mod lifecycle;
#[path = "conformance/operators.rs"]
mod operators;
#[path = "conformance/records.rs"]
mod records;
#[path = "conformance/sql.rs"]
mod sql;
#[path = "conformance/support.rs"]
mod support;

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

/// One `#[tokio::test]` per case for the store type `$store`, each skipped (it says why) when
/// `$available` is false: a server the test process has none of outside CI.
macro_rules! tests {
    ($store:ty, $available:expr; $($module:ident::$case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if !$available {
                    return;
                }
                crate::run(crate::$module::$case::<$store>).await;
            }
        )+
    };
}

/// Every case, against one backend: `backend!(module: StoreType);`. A store whose payloads
/// are bounded (DynamoDB's item) runs every case but the multi-megabyte bodies:
/// `backend!(module: StoreType, when available, bounded);`.
macro_rules! backend {
    ($backend:ident: $store:ty) => {
        backend!($backend: $store, when true; bulk::large_bodies_round_trip_exactly);
    };
    ($backend:ident: $store:ty, when $available:expr, bounded) => {
        backend!($backend: $store, when $available;);
    };
    ($backend:ident: $store:ty, when $available:expr; $($extra:ident::$extra_case:ident),*) => {
        mod $backend {
            tests! { $store, $available;
                lifecycle::claim_complete_replay,
                lifecycle::completed_records_are_never_taken_over,
                lifecycle::in_flight_duplicates_are_reported,
                lifecycle::fingerprint_mismatch_while_in_flight,
                lifecycle::fingerprint_mismatch_once_completed,
                lifecycle::lapsed_lease_is_taken_over_by_the_same_request,
                lifecycle::renew_extends_the_lease,
                lifecycle::displaced_owner_is_fenced_out,
                lifecycle::fenced_writes_need_the_token_and_a_record,
                lifecycle::expired_records_are_invisible,
                lifecycle::completion_sets_the_expiry,
                lifecycle::released_record_is_claimable_again,
                lifecycle::keys_are_independent,
                bulk::purge_is_bounded_and_takes_only_expired_records,
                bulk::concurrent_claimers_one_acquires,
                bulk::concurrent_takeover_one_wins,
                bulk::binary_bodies_and_header_values_round_trip,
                bulk::repeated_headers_keep_their_order,
                records::records_list_what_operators_read,
                records::filters_select_by_operation_state_scope_and_age,
                records::a_record_is_read_with_its_payload,
                records::forget_refuses_a_live_owner_and_deletes_the_rest,
                records::forced_forget_fences_the_owner_out,
                records::purge_takes_completed_records_of_one_window,
                records::stats_count_by_operation_and_state,
                $($extra::$extra_case),*
            }
        }
    };
}

backend!(memory: idem_runtime::store::MemoryStore);
backend!(sqlite: idem_runtime::store::SqliteStore);
backend!(postgres: idem_runtime::store::PostgresStore);
backend!(object: idem_runtime::store::BucketStore);
backend!(redis: idem_runtime::store::RedisStore);
backend!(redis_cluster: idem_tests::redis::RedisClusterStore);
backend!(dynamodb: idem_runtime::store::DynamoDbStore,
    when idem_tests::dynamodb::dynamodb_endpoint().is_some(), bounded);
