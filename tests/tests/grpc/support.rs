//! An engine per test on the case's store, the service over it, and call helpers.

use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Builder, Caller, Idempotency};
pub(crate) use idem_tests::Calls;
use idem_tests::Gate;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

use crate::service::{Charge, ChargeRequest, Service, descriptors};

/// Which store backs the engine under test.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Store {
    Memory,
    Sqlite,
    Postgres,
    MySql,
    Redis,
}

/// The tenant resolver: `authorization: Bearer tenant_<name>` in the metadata.
pub(crate) fn tenant_of(caller: &Caller<'_>) -> Option<String> {
    let value = caller.metadata("authorization")?;
    value.strip_prefix("Bearer tenant_").map(str::to_owned)
}

pub(crate) async fn builder(store: Store) -> Builder {
    let builder = Idempotency::builder()
        .scope("tenant", tenant_of)
        .protobuf_descriptors(&descriptors());
    match store {
        Store::Memory => builder.store(MemoryStore::new()),
        Store::Sqlite => builder.store(idem_tests::sqlite_store().await),
        Store::Postgres => builder.store(idem_tests::postgres_store().await),
        Store::MySql => builder.store(idem_tests::mysql_store().await),
        Store::Redis => builder.store(idem_tests::redis_store().await),
    }
}

/// The service over an engine on `store`, on a manual clock.
pub(crate) async fn service(store: Store) -> (Service, ManualClock) {
    let clock = ManualClock::new();
    let idempotency = builder(store).await.clock(clock.clone()).build().unwrap();
    let service = Service {
        idempotency,
        calls: Calls::default(),
        gate: Gate::default(),
    };
    (service, clock)
}

/// A charge of `amount` with key `key` (in the field; `""` for none) from tenant `acme`.
pub(crate) fn charge(key: &str, amount: i64) -> ChargeRequest {
    ChargeRequest {
        request_id: key.to_owned(),
        amount,
        outcome: "ok".into(),
        ..Default::default()
    }
}

/// `message` as a call from `tenant`.
pub(crate) fn from(tenant: &str, message: ChargeRequest) -> Request<ChargeRequest> {
    let mut request = Request::new(message);
    let bearer = format!("Bearer tenant_{tenant}");
    request
        .metadata_mut()
        .insert("authorization", bearer.parse().unwrap());
    request
}

/// `message` as a call from tenant `acme`.
pub(crate) fn call(message: ChargeRequest) -> Request<ChargeRequest> {
    from("acme", message)
}

/// `request` with `value` in metadata entry `name`.
pub(crate) fn with_metadata(
    mut request: Request<ChargeRequest>,
    name: &'static str,
    value: &str,
) -> Request<ChargeRequest> {
    let value: MetadataValue<_> = value.parse().unwrap();
    request.metadata_mut().append(name, value);
    request
}

/// Whether a reply's metadata says it is a replay.
pub(crate) fn replayed(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get(idem_runtime::grpc::REPLAYED_METADATA)
        .is_some_and(|value| value == "true")
}

/// The charge of a successful reply.
pub(crate) fn ok(reply: Result<Response<Charge>, Status>) -> (Charge, bool) {
    let response = reply.unwrap_or_else(|status| panic!("expected a charge, got {status:?}"));
    let replayed = replayed(response.metadata());
    (response.into_inner(), replayed)
}

/// The status of a failed reply.
pub(crate) fn failed(reply: Result<Response<Charge>, Status>) -> Status {
    match reply {
        Ok(response) => panic!("expected a status, got {:?}", response.get_ref()),
        Err(status) => status,
    }
}

/// Asserts an engine answer: its code, its `ErrorInfo` reason and domain, and whether it
/// carries a `RetryInfo`.
pub(crate) fn assert_answer(status: &Status, code: Code, reason: &str, retry: bool) {
    assert_eq!(status.code(), code, "{status:?}");
    let details = status.get_error_details();
    let info = details.error_info().expect("an ErrorInfo");
    assert_eq!(info.reason, reason, "{status:?}");
    assert_eq!(info.domain, idem_runtime::grpc::ERROR_DOMAIN);
    assert_eq!(details.retry_info().is_some(), retry, "{status:?}");
}
