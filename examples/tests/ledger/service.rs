//! The service around `CreateTransfer`: tenants (`UNAUTHENTICATED` before any method runs),
//! reflection and health, graceful shutdown, and a store outage answered `UNAVAILABLE`.

use std::time::{Duration, Instant};

use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use super::support::{
    CreateTransferRequest, Database, ENGINE_DOMAIN, GetTransferRequest, as_tenant,
    assert_error_info, channel, client, create, replayed, request_id, retry_delay, spawn_create,
    transfer, wait_for_output,
};
use crate::common::{PgDatabase, STEP_TIMEOUT};
use crate::proxy::{TcpProxy, postgres_addr, via_proxy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_tenant_are_unauthenticated() {
    let db = Database::sqlite();
    let server = db.server().start();
    let mut ledger = client(&server).await;
    let new = transfer(&request_id(), "acct_b", 500);

    for authorization in [
        None,
        Some("Bearer acme"),
        Some("Basic dGVuYW50X2FjbWU="),
        Some("Bearer tenant_"),
    ] {
        let mut create = tonic::Request::new(new.clone());
        let mut get = tonic::Request::new(GetTransferRequest { id: "tr_x".into() });
        if let Some(value) = authorization {
            let value: MetadataValue<_> = value.parse().unwrap();
            create.metadata_mut().insert("authorization", value.clone());
            get.metadata_mut().insert("authorization", value);
        }
        let status = ledger.create_transfer(create).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{authorization:?}: {status:?}"
        );
        let status = ledger.get_transfer(get).await.unwrap_err();
        assert_eq!(
            status.code(),
            Code::Unauthenticated,
            "{authorization:?}: {status:?}"
        );
    }
    // Refused before the engine saw it: the request_id is still free.
    let made = create(&mut ledger, "acme", &new).await.unwrap();
    assert!(!replayed(made.metadata()));
    assert_eq!(db.transfers().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_and_health_describe_the_service() {
    let server = Database::sqlite().server().start();
    let channel = channel(&server).await;

    let mut health = HealthClient::new(channel.clone());
    for service in ["ledger.v1.Ledger", ""] {
        let request = HealthCheckRequest {
            service: service.into(),
        };
        let status = health.check(request).await.unwrap().into_inner().status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }

    let mut reflection = ServerReflectionClient::new(channel);
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = reflection
        .server_reflection_info(tokio_stream::iter([ask]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().expect("an answer");
    let Some(MessageResponse::ListServicesResponse(list)) = answer.message_response else {
        panic!("not a list of services: {answer:?}");
    };
    let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "ledger.v1.Ledger"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_call_in_flight_finish() {
    let db = Database::sqlite();
    let mut server = db.server().env("SLOW_MS", "1000").start();
    let ledger = client(&server).await;
    let running = spawn_create(&ledger, "acme", &transfer(&request_id(), "acct_slow", 300));
    wait_for_output(&server, "transfer to acct_slow").await;

    let status = tokio::task::block_in_place(|| server.terminate());
    assert!(status.success(), "{status}\n{}", server.output());
    let made = running
        .await
        .unwrap()
        .expect("the call in flight is answered");
    assert_eq!(made.into_inner().amount, 300);
    assert_eq!(db.transfers().await, 1);
}

/// PostgreSQL behind a link the test cuts: with the store unreachable, the engine answers
/// `UNAVAILABLE` with `RetryInfo` and runs nothing; once the link is back the retry runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_unavailable_with_retry_info() {
    let database = PgDatabase::create().await;
    let link = TcpProxy::start(postgres_addr(&database.url)).await;
    let db = Database::Postgres(database);
    let server = db
        .server()
        .env("DATABASE_URL", via_proxy(&db.url(), link.addr()))
        .start();
    let mut ledger = client(&server).await;
    let new = transfer(&request_id(), "acct_b", 500);

    link.set_up(false);
    let status = create(&mut ledger, "acme", &new).await.unwrap_err();
    assert_error_info(
        &status,
        Code::Unavailable,
        ENGINE_DOMAIN,
        "IDEMPOTENCY_STORE_UNAVAILABLE",
    );
    assert!(retry_delay(&status) > Duration::ZERO);
    assert!(!status.message().contains("127.0.0.1"), "{status:?}");

    link.set_up(true);
    let made = retry_while_unavailable(&mut ledger, &new).await;
    assert!(
        !replayed(made.metadata()),
        "the failed attempt stored nothing"
    );
    assert_eq!(db.transfers().await, 1);
}

/// The link cut while `CreateTransfer` runs (past the claim, before its write): the method's own
/// query fails, the call is answered `UNAVAILABLE` (not stored), and once the link is back the
/// retry makes the one transfer. On PostgreSQL with one commit the claim was in the transaction
/// the cut killed, so no lease stands in the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_failure_mid_call_is_unavailable_and_the_retry_runs_once() {
    let database = PgDatabase::create().await;
    let link = TcpProxy::start(postgres_addr(&database.url)).await;
    let db = Database::Postgres(database);
    let server = db
        .server()
        .env("DATABASE_URL", via_proxy(&db.url(), link.addr()))
        .env("SLOW_MS", "1000")
        .start();
    let mut ledger = client(&server).await;
    let new = transfer(&request_id(), "acct_slow", 800);

    let running = spawn_create(&ledger, "acme", &new);
    wait_for_output(&server, "transfer to acct_slow").await;
    link.set_up(false);
    let status = running.await.unwrap().unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!replayed(status.metadata()));
    assert!(
        !status.message().contains("127.0.0.1") && !status.message().contains("sqlx"),
        "database details leaked: {status:?}"
    );

    link.set_up(true);
    let made = retry_while_unavailable(&mut ledger, &new).await;
    assert!(!replayed(made.metadata()), "the failed call stored nothing");
    assert_eq!(db.transfers().await, 1);
}

/// Sends `new` until it is answered something else than `UNAVAILABLE` (the pool reconnecting);
/// bounded by [`STEP_TIMEOUT`].
async fn retry_while_unavailable(
    ledger: &mut super::support::LedgerClient<tonic::transport::Channel>,
    new: &CreateTransferRequest,
) -> tonic::Response<super::support::Transfer> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        match ledger.create_transfer(as_tenant("acme", new.clone())).await {
            Err(status) if status.code() == Code::Unavailable => {
                assert!(Instant::now() < deadline, "still {status:?}");
                tokio::time::sleep(retry_delay(&status).min(Duration::from_millis(250))).await;
            }
            answer => return answer.expect("the retry runs"),
        }
    }
}
