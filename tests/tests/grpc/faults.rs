//! Faults and misconfiguration through the gRPC face: a store that fails, request messages the
//! engine has no descriptors for.

use idem_runtime::store::MemoryStore;
use idem_runtime::{BuildError, Idempotency};
use idem_tests::Gate;
use tonic::Code;

use crate::service::{Payments, Service};
use crate::support::*;

/// Every store failing: the memory store full, the SQL pools closed, Redis behind a cut proxy.
/// The method does not run; the call is `UNAVAILABLE` with a `RetryInfo`, which gRPC retry
/// policies retry.
pub(crate) async fn a_store_failure_fails_closed_with_unavailable(store: Store) {
    let mut outage = None;
    let builder = Idempotency::builder()
        .scope("tenant", tenant_of)
        .protobuf_descriptors(&crate::service::descriptors());
    let (builder, reason) = match store {
        Store::Memory => (
            builder.store(MemoryStore::with_capacity(1)),
            "IDEMPOTENCY_STORE_FULL",
        ),
        Store::Sqlite => {
            let store = idem_tests::sqlite_store().await;
            store.pool().close().await;
            (builder.store(store), "IDEMPOTENCY_STORE_UNAVAILABLE")
        }
        Store::Postgres => {
            let store = idem_tests::postgres_store().await;
            store.pool().close().await;
            (builder.store(store), "IDEMPOTENCY_STORE_UNAVAILABLE")
        }
        Store::MySql => {
            let store = idem_tests::mysql_store().await;
            store.pool().close().await;
            (builder.store(store), "IDEMPOTENCY_STORE_UNAVAILABLE")
        }
        Store::Redis => {
            let (store, proxy) = idem_tests::redis::unreachable_store().await;
            outage = Some(proxy);
            (builder.store(store), "IDEMPOTENCY_STORE_UNAVAILABLE")
        }
    };
    let service = Service {
        idempotency: builder
            .store_timeout(std::time::Duration::from_millis(500))
            .build()
            .unwrap(),
        calls: Calls::default(),
        gate: Gate::default(),
    };
    if let Store::Memory = store {
        // The one record the store has room for.
        ok(service.charge(call(charge("k0", 100))).await);
    }
    let before = service.calls.get();
    let status = failed(service.charge(call(charge("k1", 100))).await);
    assert_answer(&status, Code::Unavailable, reason, true);
    assert_eq!(service.calls.get(), before, "the method did not run");
    drop(outage);
}

/// A reply over the replay limit: the first caller gets it, its retries a status saying it was
/// not kept, and the method never runs again for that key.
pub(crate) async fn a_reply_over_the_replay_limit_is_never_run_again(store: Store) {
    let service = Service {
        idempotency: builder(store).await.max_response_bytes(16).build().unwrap(),
        calls: Calls::default(),
        gate: Gate::default(),
    };
    let (first, _) = ok(service.charge(call(charge("k1", 100))).await);
    assert_eq!(first.amount, 100);
    for _ in 0..2 {
        let status = failed(service.charge(call(charge("k1", 100))).await);
        assert_answer(
            &status,
            Code::FailedPrecondition,
            "IDEMPOTENCY_RESPONSE_TOO_LARGE",
            false,
        );
        assert!(replayed(status.metadata()));
    }
    assert_eq!(service.calls.get(), 1);
}

#[tokio::test]
async fn a_message_without_descriptors_is_internal_and_runs_nothing() {
    let service = Service {
        idempotency: Idempotency::builder()
            .store(MemoryStore::new())
            .scope("tenant", tenant_of)
            // Not told it serves the service: told, the build refuses it (see
            // `build_refuses_...` below).
            .build()
            .unwrap(),
        calls: Calls::default(),
        gate: Gate::default(),
    };
    let status = failed(service.charge(call(charge("k1", 100))).await);
    assert_answer(&status, Code::Internal, "IDEMPOTENCY_MISCONFIGURED", false);
    assert!(
        status.message().contains("protobuf_descriptors"),
        "{status:?}"
    );
    assert_eq!(service.calls.get(), 0);
}

#[test]
fn build_refuses_a_method_whose_scope_has_no_resolver_or_whose_message_has_no_descriptors() {
    let without_resolver = Idempotency::builder()
        .store(MemoryStore::new())
        .protobuf_descriptors(&crate::service::descriptors())
        .serves(Service::IDEMPOTENT_PAYMENTS)
        .build();
    match without_resolver {
        Err(BuildError::UnresolvedScope { endpoint, scope }) => {
            assert!(endpoint.starts_with("grpc::service::"), "{endpoint}");
            assert_eq!(scope, "tenant");
        }
        other => panic!("{other:?}"),
    }
    let without_descriptors = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("tenant", tenant_of)
        .serves(Service::IDEMPOTENT_PAYMENTS)
        .build();
    match without_descriptors {
        Err(error @ BuildError::MissingDescriptors { .. }) => {
            assert!(
                error.to_string().contains("test.v1.ChargeRequest"),
                "{error}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn descriptors_that_do_not_decode_fail_the_build() {
    let built = Idempotency::builder()
        .store(MemoryStore::new())
        .protobuf_descriptors(b"\xff\xff not a descriptor set")
        .build();
    assert!(matches!(built, Err(BuildError::ProtobufDescriptors(_))));
}

#[tokio::test]
async fn a_scope_without_a_resolver_is_internal_and_runs_nothing() {
    let service = Service {
        idempotency: Idempotency::builder()
            .store(MemoryStore::new())
            .protobuf_descriptors(&crate::service::descriptors())
            .build()
            .unwrap(),
        calls: Calls::default(),
        gate: Gate::default(),
    };
    let status = failed(service.charge(call(charge("k1", 100))).await);
    assert_answer(&status, Code::Internal, "IDEMPOTENCY_SCOPE_UNKNOWN", false);
    assert_eq!(service.calls.get(), 0);
}

#[tokio::test]
async fn a_transaction_outside_an_idempotent_method_is_internal() {
    // No engine lent this request anything (as on a store without transactions).
    let request = tonic::Request::new(charge("k1", 100));
    let status = idem_runtime::grpc::tx::<sqlx::Sqlite, _>(&request).unwrap_err();
    assert_answer(&status, Code::Internal, "IDEMPOTENCY_MISCONFIGURED", false);
    let any = idem_runtime::grpc::any_tx(&request).unwrap();
    assert!(matches!(any, idem_runtime::AnyTx::None));
}
