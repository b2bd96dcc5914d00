//! The engine's rules through the gRPC face: `#[idempotent]` methods of a tonic service under
//! `#[idem_runtime::grpc::service]`, called as tonic's server calls them, on the memory,
//! SQLite, PostgreSQL, MySQL/MariaDB and Redis stores. Atomic mode on the SQL stores is in `atomic`.
//!
//! Each case is an `async fn(Store)`; `cases!` instantiates it once per store, as
//! `memory::<case>`, ..., `redis::<case>`.

mod atomic;
mod cases;
mod faults;
mod service;
mod support;

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        cases!(@store memory, Memory; $($case),*);
        cases!(@store sqlite, Sqlite; $($case),*);
        cases!(@store postgres, Postgres; $($case),*);
        cases!(@store mysql, MySql; $($case),*);
        cases!(@store redis, Redis; $($case),*);
    };
    (@store $module:ident, $store:ident; $($case:ident),*) => {
        mod $module {
            use crate::support::Store;
            $(
                #[tokio::test]
                async fn $case() {
                    crate::$case(Store::$store).await;
                }
            )*
        }
    };
}

use cases::*;
use faults::*;

cases!(
    calls_without_a_key_run_every_time,
    a_retry_gets_the_stored_message_and_metadata_marked_replayed,
    a_key_in_the_field_or_the_metadata_is_one_request,
    keys_that_disagree_or_are_malformed_are_invalid_argument,
    a_metadata_keyed_method_reads_its_own_entry,
    map_order_field_order_and_unknown_fields_never_make_a_conflict,
    a_key_reused_with_another_request_is_failed_precondition,
    final_statuses_are_stored_and_replayed,
    other_statuses_release_the_key,
    panics_release_the_key,
    an_in_flight_duplicate_is_aborted_with_retry_info,
    wait_mode_replays_the_first_reply,
    scopes_isolate_tenants_and_an_unknown_caller_is_unauthenticated,
    methods_do_not_share_keys,
    a_dropped_call_runs_to_its_end_and_its_retry_replays,
    completed_records_expire_after_their_ttl,
    a_deadline_in_the_extensions_ends_the_lease,
    a_store_failure_fails_closed_with_unavailable,
    a_reply_over_the_replay_limit_is_never_run_again,
);
