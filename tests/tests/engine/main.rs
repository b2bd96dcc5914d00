//! Every rule of one idempotent request, through `Router` + `oneshot`, on both HTTP faces (the
//! `#[idempotent]` attribute and `IdempotencyLayer`) and the memory, SQLite,
//! PostgreSQL, MySQL/MariaDB and Redis stores.
//!
//! Each case is an `async fn(Setup)`; `cases!` instantiates it once per face and store, as
//! `attribute::memory::<case>`, ..., `layer::redis::<case>`.

mod cases;
mod handlers;
mod lifecycle;
mod support;

macro_rules! cases {
    ($($case:ident),* $(,)?) => {
        mod attribute {
            cases!(@stores Attribute; $($case),*);
        }
        mod layer {
            cases!(@stores Layer; $($case),*);
        }
    };
    (@stores $face:ident; $($case:ident),*) => {
        cases!(@store memory, $face, Memory; $($case),*);
        cases!(@store sqlite, $face, Sqlite; $($case),*);
        cases!(@store postgres, $face, Postgres; $($case),*);
        cases!(@store mysql, $face, MySql; $($case),*);
        cases!(@store redis, $face, Redis; $($case),*);
    };
    (@store $module:ident, $face:ident, $store:ident; $($case:ident),*) => {
        mod $module {
            use crate::support::{Face, Setup, Store};
            $(
                #[tokio::test]
                async fn $case() {
                    let setup = Setup { face: Face::$face, store: Store::$store };
                    crate::$case(setup).await;
                }
            )*
        }
    };
}

use cases::*;
use lifecycle::*;

cases!(
    requests_without_a_key_run_every_time,
    safe_methods_never_touch_the_store,
    required_key_missing_is_400,
    invalid_keys_are_400_and_do_not_run,
    quoted_and_bare_keys_are_one_key,
    replay_is_byte_identical_and_marked,
    json_bodies_are_canonicalised,
    reused_key_with_another_body_is_422,
    reused_key_on_another_query_is_422,
    extractor_rejections_are_not_stored,
    client_errors_are_stored_and_replayed,
    server_errors_release_the_key,
    set_cookie_and_hop_by_hop_headers_are_not_replayed,
    oversized_body_is_413_and_runs_nothing,
    unresolved_scope_is_401,
    scopes_isolate_tenants,
    endpoints_do_not_share_keys,
    custom_header_name,
    every_extractor_kind_works,
    in_flight_duplicate_is_409_with_retry_after,
    in_flight_duplicate_with_other_body_is_422,
    wait_mode_replays_the_first_response,
    wait_mode_gives_up_with_409,
    panics_release_the_key,
    a_dropped_request_runs_to_its_end_and_its_retry_replays,
    lapsed_lease_is_taken_over_and_the_old_owner_is_fenced,
    completed_records_expire_after_their_ttl,
    oversized_responses_are_sent_but_never_rerun,
    store_failure_fails_closed_with_503,
);
