//! The store conformance suite against every backend: every case of
//! [`idem_core::testing::conformance`] (one record's life, purges and concurrent claimers,
//! payloads, operators' records) runs against each, each test on a store of its own (a
//! PostgreSQL schema, a MySQL database, a SQLite file, a Redis key prefix, a DynamoDB table on the moto server the
//! harness starts), so they run in parallel. Redis runs twice: on the shared server, and on a one-node
//! Redis Cluster this process starts. `MemoryStore` is the reference; the others must behave
//! exactly like it. Times are explicit `Timestamp`s: no sleeps, no timing assertions.
//!
//! The cases live in `idem-core` (feature `testing`) so that a store written elsewhere runs the
//! same suite with one call ([`conformance::run_all`]). Here each case is a test of its own per
//! backend, so a failure is named, and the stores are discarded afterwards.
//!
//! A new backend is one `impl TestStore` in `tests/src/` and one `backend!` line below.
//! [`encoding`] holds what the stores must keep of the HTTP face's response encoding (which the
//! core suite knows nothing of: its payloads are opaque bytes). [`sql`] holds what only the SQL
//! stores have: migrations, connection settings; [`operators`] the upgrade from the first
//! release's schema and the operator queries the README documents.
//!
//! ```text
//! cargo test -p idem-tests --test conformance
//! ```

#[path = "conformance/operators.rs"]
mod operators;
#[path = "conformance/sql.rs"]
mod sql;

use std::future::Future;

use idem_core::testing::conformance;
use idem_runtime::store::Admin;
use idem_tests::TestStore;

/// Runs `case`, the case named `name`, on a fresh store of `S` and discards the store
/// afterwards, even if the case panicked (the panic is then resumed).
///
/// A case of the core suite must fit the store's payload limit: one that does not belongs in
/// the backend's skipped list (`bounded`), where [`skipped`] checks it.
async fn run<S, F>(name: &str, case: impl FnOnce(S) -> F)
where
    S: TestStore + Admin,
    F: Future<Output = ()> + Send + 'static,
{
    let store = S::fresh().await;
    let limit = conformance::payload_limit(&store);
    if conformance::case::<S>(name).is_some_and(|case| !case.fits(limit)) {
        store.discard().await;
        panic!("`{name}` stores more than the store keeps ({limit:?} bytes): list it as skipped");
    }
    let outcome = tokio::spawn(case(store.clone())).await;
    store.discard().await;
    if let Err(failure) = outcome {
        std::panic::resume_unwind(failure.into_panic());
    }
}

/// Checks that the store `S` cannot run the case named `name`: it stores payloads larger than
/// the store's declared payload limit. The case is skipped, and says so.
async fn skipped<S: TestStore + Admin>(name: &str) {
    let store = S::fresh().await;
    let limit = conformance::payload_limit(&store);
    store.discard().await;
    let case = conformance::case::<S>(name).expect("a case of the suite");
    assert!(
        !case.fits(limit),
        "`{name}` ({} bytes) fits the store's payload limit ({limit:?}): run it",
        case.largest_payload
    );
    eprintln!(
        "skipped: `{name}` stores {} bytes, over the store's payload limit of {limit:?}",
        case.largest_payload
    );
}

/// One `#[tokio::test]` per case for the store type `$store`. `$module` is [`conformance`] (the
/// core suite) or [`encoding`].
macro_rules! tests {
    ($store:ty; $($module:ident::$case:ident),+ $(,)?) => {
        /// Every case this backend runs.
        const RUN: &[&str] = &[$(stringify!($case)),+];

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                crate::run(stringify!($case), crate::$module::$case::<$store>).await;
            }
        )+
    };
}

/// One `#[tokio::test]` per case of the core suite that the store type `$store` skips, checking
/// that its payload limit is why.
macro_rules! skipped {
    ($store:ty; $($case:ident),* $(,)?) => {
        /// Every case of the core suite this backend skips.
        const SKIPPED: &[&str] = &[$(stringify!($case)),*];

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                crate::skipped::<$store>(stringify!($case)).await;
            }
        )*
    };
}

/// Every case, against one backend: `backend!(module: StoreType);`. A store whose payloads
/// are bounded (DynamoDB's item) runs every case but the multi-megabyte payloads, and checks
/// that its declared payload limit is why: `backend!(module: StoreType, bounded);`.
macro_rules! backend {
    ($backend:ident: $store:ty) => {
        backend!($backend: $store;
            conformance::large_payloads_round_trip_exactly; skipping);
    };
    ($backend:ident: $store:ty, bounded) => {
        backend!($backend: $store; ; skipping large_payloads_round_trip_exactly);
    };
    ($backend:ident: $store:ty;
        $($extra:ident::$extra_case:ident),*; skipping $($skipped:ident),*) => {
        mod $backend {
            tests! { $store;
                conformance::claim_complete_replay,
                conformance::completed_records_are_never_taken_over,
                conformance::in_flight_duplicates_are_reported,
                conformance::fingerprint_mismatch_while_in_flight,
                conformance::fingerprint_mismatch_once_completed,
                conformance::lapsed_lease_is_taken_over_by_the_same_request,
                conformance::renew_extends_the_lease,
                conformance::displaced_owner_is_fenced_out,
                conformance::fenced_writes_need_the_token_and_a_record,
                conformance::expired_records_are_invisible,
                conformance::completion_sets_the_expiry,
                conformance::released_record_is_claimable_again,
                conformance::keys_are_independent,
                conformance::purge_is_bounded_and_takes_only_expired_records,
                conformance::concurrent_claimers_one_acquires,
                conformance::concurrent_takeover_one_wins,
                conformance::binary_payloads_round_trip_exactly,
                conformance::records_list_what_operators_read,
                conformance::filters_select_by_operation_state_scope_and_age,
                conformance::a_record_is_read_with_its_payload,
                conformance::forget_refuses_a_live_owner_and_deletes_the_rest,
                conformance::forced_forget_fences_the_owner_out,
                conformance::purge_takes_completed_records_of_one_window,
                conformance::stats_count_by_operation_and_state,
                encoding::binary_bodies_and_header_values_round_trip,
                encoding::repeated_headers_keep_their_order,
                $($extra::$extra_case),*
            }

            skipped! { $store; $($skipped),* }

            /// A case added to the core suite runs here too, or is skipped for a reason.
            #[test]
            fn every_case_of_the_suite_is_run_or_skipped() {
                for case in crate::conformance::CASES {
                    let (run, skipped) = (RUN.contains(case), SKIPPED.contains(case));
                    assert!(run != skipped, "`{case}`: run {run}, skipped {skipped}");
                }
            }
        }
    };
}

backend!(memory: idem_runtime::store::MemoryStore);
backend!(sqlite: idem_runtime::store::SqliteStore);
backend!(postgres: idem_runtime::store::PostgresStore);
backend!(mysql: idem_runtime::store::MySqlStore);
backend!(object: idem_runtime::store::BucketStore);
backend!(redis: idem_runtime::store::RedisStore);
backend!(redis_cluster: idem_tests::redis::RedisClusterStore);
backend!(dynamodb: idem_runtime::store::DynamoDbStore, bounded);

/// What the stores must keep of the HTTP face's response encoding ([`StoredResponse`]): opaque
/// header bytes, repeated headers in their order. The core suite stores plain bytes; these
/// store encoded responses, on every backend.
///
/// [`StoredResponse`]: idem_runtime::StoredResponse
mod encoding {
    use bytes::Bytes;
    use http::{HeaderName, HeaderValue, StatusCode};
    use idem_runtime::StoredResponse;
    use idem_runtime::clock::Timestamp;
    use idem_runtime::store::Fingerprint;
    use idem_runtime::store::RecordKey;
    use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};

    fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
        (
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        )
    }

    /// Claims key `n` at `at_ms` milliseconds past the suite's epoch, under `token`.
    async fn claim<S: Store>(store: &S, n: u8, token: i64, at_ms: u64) -> Claim {
        let now = Timestamp::from_millis(1_750_000_000_000).after(ms(at_ms));
        let (key, fingerprint) = (RecordKey::from_bytes([n; 32]), fingerprint(n));
        store
            .claim(ClaimRequest {
                key: &key,
                fingerprint: &fingerprint,
                token: LeaseToken::from_i64(token),
                now,
                lease_until: now.after(ms(30_000)),
                expires_at: now.after(ms(24 * 3_600_000)),
                operation: "conformance::create",
                scope: "org",
                scope_value: "acme",
                tenant: 0,
            })
            .await
            .expect("claim")
    }

    fn ms(n: u64) -> std::time::Duration {
        std::time::Duration::from_millis(n)
    }

    fn fingerprint(n: u8) -> Fingerprint {
        let mut bytes = [n; 32];
        bytes[0] = 0xf0;
        Fingerprint::from_bytes(bytes)
    }

    /// Stores `stored`, encoded, under key `n` and decodes what a replaying claim reads back.
    async fn round_trip<S: Store>(store: &S, n: u8, stored: &StoredResponse) -> StoredResponse {
        let acquired = claim(store, n, 1, 0).await;
        assert_eq!(acquired, Claim::Acquired { took_over: false });
        let payload = stored.encode();
        let completion = Completion {
            payload: &payload,
            status: Some(stored.status().as_u16()),
            completed_at: Timestamp::from_millis(1_750_000_000_000),
            expires_at: Timestamp::from_millis(1_750_000_000_000).after(ms(24 * 3_600_000)),
        };
        let key = RecordKey::from_bytes([n; 32]);
        let held = store.complete(&key, LeaseToken::from_i64(1), completion);
        assert_eq!(held.await.expect("complete"), Fence::Held);
        match claim(store, n, 2, 1).await {
            Claim::Completed {
                fingerprint: found,
                payload,
                ..
            } => {
                assert_eq!(found, fingerprint(n));
                StoredResponse::decode(&payload).expect("the payload decodes")
            }
            other => panic!("expected a completed record, got {other:?}"),
        }
    }

    pub(crate) async fn binary_bodies_and_header_values_round_trip<S: Store + Clone>(store: S) {
        // Every byte value, NUL and invalid UTF-8 included; opaque (non-ASCII) header bytes.
        let body: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let stored = StoredResponse::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            [
                header("content-type", "application/octet-stream"),
                (
                    HeaderName::from_static("x-opaque"),
                    HeaderValue::from_bytes(b"caf\xe9 \xff\x80").unwrap(),
                ),
            ],
            Bytes::from(body),
        );
        assert_eq!(round_trip(&store, 1, &stored).await, stored);
        // An empty body and no headers.
        let empty = StoredResponse::new(StatusCode::NO_CONTENT, [], Bytes::new());
        assert_eq!(round_trip(&store, 2, &empty).await, empty);
    }

    pub(crate) async fn repeated_headers_keep_their_order<S: Store + Clone>(store: S) {
        let stored = StoredResponse::new(
            StatusCode::ACCEPTED,
            [
                header("x-a", "1"),
                header("link", "</a>; rel=next"),
                header("x-a", "2"),
                header("vary", "accept"),
                header("link", "</b>; rel=prev"),
                header("x-a", "3"),
                header("x-empty", ""),
            ],
            Bytes::from_static(b"{}"),
        );
        let replayed = round_trip(&store, 1, &stored).await;
        assert_eq!(replayed.headers(), stored.headers());
        assert_eq!(replayed, stored);
    }
}
