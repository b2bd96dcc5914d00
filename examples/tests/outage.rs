//! A database outage that hits a request after the engine claimed its key: PostgreSQL sits
//! behind a loopback link the test cuts while the charge runs. The handler's own query fails,
//! and the client is told to retry (`503 database_unavailable` with `Retry-After`), not that
//! the server is broken (500). Once the link is back, the same key charges once.

mod common;
#[allow(dead_code)] // The HTTP proxy is the client tests'.
mod proxy;

use std::time::{Duration, Instant};

use common::{PgDatabase, STEP_TIMEOUT, Server, charge};
use proxy::{TcpProxy, postgres_addr, via_proxy};

/// How long the charge runs before its first query: the window the link is cut in.
const SLOW_MS: &str = "2000";
const LEASE_MS: &str = "1500";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_claim_during_an_outage_is_503_with_retry_after() {
    let db = PgDatabase::create().await;
    let link = TcpProxy::start(postgres_addr(&db.url)).await;
    let server = Server::builder()
        .env("DATABASE_URL", via_proxy(&db.url, link.addr()))
        .env("SLOW_MS", SLOW_MS)
        .env("IDEM_LEASE_MS", LEASE_MS)
        .start();
    let request = server
        .post("/v1/charges")
        .org("acme")
        .key("outage-past-claim")
        .json(&charge(900, "tok_slow"));

    // Two copies at once: one claims the key and runs for SLOW_MS; the other is answered 409
    // at once, which proves the first is past the claim.
    let mut a = tokio::spawn(request.clone().start().await.response());
    let mut b = tokio::spawn(request.clone().start().await.response());
    let (answered, in_flight) = tokio::select! {
        answered = &mut a => (answered, b),
        answered = &mut b => (answered, a),
    };
    let duplicate = answered.expect("request task");
    duplicate.assert_problem(409, "idempotency_key_in_progress");
    link.set_up(false);

    let failed = in_flight.await.expect("request task");
    let doc = failed.assert_problem(503, "database_unavailable");
    assert_eq!(failed.header("retry-after"), Some("1"), "{doc}");
    assert!(
        !failed.text().contains("sqlx") && !failed.text().contains("127.0.0.1"),
        "database details leaked: {doc}"
    );

    link.set_up(true);
    let deadline = Instant::now() + STEP_TIMEOUT;
    let created = loop {
        let response = request.clone().send().await;
        match response.status {
            201 => break response,
            409 | 503 => {
                assert!(
                    response.header("retry-after").is_some(),
                    "{}",
                    response.text()
                );
                assert!(
                    Instant::now() < deadline,
                    "the key never freed: {}",
                    response.text()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => panic!("unexpected {other}: {}", response.text()),
        }
    };
    assert!(!created.is_replay(), "the failed attempt was not stored");
    let list = server.get("/v1/charges").org("acme").send().await;
    assert_eq!(
        list.json()["data"],
        serde_json::json!([created.json()]),
        "charged once"
    );
}
