//! The payments binary's configuration and lifecycle, end to end: store selection by
//! `IDEM_STORE` / `DATABASE_URL`, a Redis that cannot be reached, graceful shutdown.

mod common;

use std::process::ExitStatus;

use common::{DynamoTable, PgDatabase, RedisPrefix, Server, charge};
use idem_tests::dynamodb::aws_env;

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

/// The line a server that refused to start printed about why (`payments: ...`), after checking
/// it did exit with a failure.
fn failure_line(status: ExitStatus, output: &str) -> String {
    assert!(!status.success(), "exited with {status}");
    output
        .lines()
        .find(|line| line.starts_with("payments: "))
        .unwrap_or_else(|| panic!("{output}"))
        .to_owned()
}

#[test]
fn an_unreachable_redis_exits_non_zero_with_a_clear_message() {
    let port = closed_port();
    let (status, output) = Server::builder()
        .env("IDEM_STORE", "redis")
        .env("REDIS_URL", format!("redis://:hunter2@127.0.0.1:{port}"))
        .run_to_exit();
    let line = failure_line(status, &output);
    assert!(
        line.contains(&format!(
            "cannot start the redis store at REDIS_URL=redis://:***@127.0.0.1:{port}: \
             idempotency store unavailable: "
        )),
        "{line}"
    );
    assert!(!output.contains("hunter2"), "{output}");
}

/// DynamoDB that does not answer: the service does not start, and says which table and why.
#[test]
fn an_unreachable_dynamodb_exits_non_zero_with_a_clear_message() {
    let port = closed_port();
    let (status, output) = Server::builder()
        .env("IDEM_STORE", "dynamodb")
        .envs(aws_env(&format!("http://127.0.0.1:{port}")))
        .run_to_exit();
    let line = failure_line(status, &output);
    assert!(
        line.contains(
            "cannot start the dynamodb store on DYNAMODB_TABLE=payments-idempotency: \
             idempotency store unavailable"
        ),
        "{line}"
    );
}

#[test]
fn a_bad_redis_prefix_exits_non_zero_and_names_it() {
    let (status, output) = Server::builder()
        .env("IDEM_STORE", "redis")
        .env("REDIS_PREFIX", "{payments}")
        .run_to_exit();
    assert!(!status.success(), "exited with {status}");
    assert!(
        output.contains("invalid Redis key prefix \"{payments}\""),
        "{output}"
    );
}

#[test]
fn an_unknown_database_url_exits_non_zero() {
    let (status, output) = Server::builder()
        .env("DATABASE_URL", "mongodb://127.0.0.1/payments")
        .run_to_exit();
    assert!(!status.success());
    assert!(output.contains("DATABASE_URL"), "{output}");
}

/// Runs a charge, its replay and the list against a started server.
async fn charge_and_replay(server: &Server, org: &str) {
    let request = server
        .post("/v1/charges")
        .org(org)
        .key("smoke-1")
        .json(&charge(4200, "tok_visa"));
    let first = request.clone().send().await;
    assert_eq!(first.status, 201, "{}", first.text());
    let retry = request.send().await;
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body);
    let list = server.get("/v1/charges").org(org).send().await.json();
    assert_eq!(list["data"].as_array().unwrap(), &vec![first.json()]);
    assert_eq!(server.get("/healthz").send().await.status, 200);
}

#[tokio::test]
async fn the_default_store_is_the_sqlite_database() {
    let server = Server::start();
    assert!(
        server.output().contains("idempotency store: sqlite"),
        "{}",
        server.output()
    );
    charge_and_replay(&server, "acme").await;
}

#[tokio::test]
async fn the_memory_store_serves_the_same_contract() {
    let server = Server::builder().env("IDEM_STORE", "memory").start();
    assert!(
        server.output().contains("idempotency store: memory"),
        "{}",
        server.output()
    );
    charge_and_replay(&server, "acme").await;
}

#[tokio::test]
async fn redis_keeps_the_records_and_the_database_the_data() {
    let redis = RedisPrefix::new();
    let server = Server::builder().redis(&redis).start();
    assert!(
        server.output().contains(&format!(
            "idempotency store: redis at {} under {}",
            redis.url, redis.prefix
        )),
        "{}",
        server.output()
    );
    charge_and_replay(&server, "acme").await;
    // One record, in Redis, named as the README says; the charge itself is in SQLite (listed
    // above by `charge_and_replay`).
    let keys = redis.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let hex = keys[0]
        .strip_prefix(&format!("{}{{", redis.prefix))
        .and_then(|rest| rest.strip_suffix('}'))
        .unwrap_or_else(|| panic!("{keys:?}"));
    assert!(
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{hex}"
    );
    // A sweeper is not needed: it says so and ends.
    assert!(
        server
            .output()
            .contains("the idempotency store expires records itself; no sweeper needed"),
        "{}",
        server.output()
    );
}

/// `IDEM_STORE=dynamodb`: the service creates its table (TTL on), keeps one item per key there,
/// and the charges in its SQLite file.
#[tokio::test]
async fn dynamodb_keeps_the_records_in_a_table_it_creates() {
    let table = DynamoTable::new();
    let server = Server::builder().dynamodb(&table).start();
    let listening = format!("idempotency store: dynamodb table {}", table.name);
    assert!(server.output().contains(&listening), "{}", server.output());
    charge_and_replay(&server, "acme").await;
    let client = idem_tests::dynamodb::dynamodb_client(&table.endpoint);
    let ttl = client
        .describe_time_to_live()
        .table_name(&table.name)
        .send()
        .await
        .expect("the server created the table");
    let ttl = ttl.time_to_live_description().expect("a TTL description");
    assert_eq!(ttl.attribute_name(), Some("expires_ttl"));
    let items = client
        .scan()
        .table_name(&table.name)
        .send()
        .await
        .expect("scan the table");
    assert_eq!(items.count(), 1, "one record for the charge and its replay");
}

#[tokio::test]
async fn postgres_serves_app_data_and_records() {
    let database = PgDatabase::create().await;
    let server = Server::builder()
        .env("DATABASE_URL", database.url.as_str())
        .start();
    assert!(
        server.output().contains("idempotency store: postgres"),
        "{}",
        server.output()
    );
    charge_and_replay(&server, "acme").await;

    let list = server.get("/v1/charges").org("acme").send().await.json();
    let id = list["data"][0]["id"].as_str().unwrap().to_owned();
    let refund = server
        .post(&format!("/v1/charges/{id}/refunds"))
        .org("acme")
        .key("refund-1")
        .send()
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text());
    assert_eq!(refund.json()["amount"], 4200);
    // The server holds connections to the database: stop it before the database goes.
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_requests_in_flight_finish() {
    let mut server = Server::builder().env("SLOW_MS", "1500").start();
    let mut attempt = 0;
    let in_flight = loop {
        attempt += 1;
        assert!(attempt <= 5, "never caught a request in flight");
        let request = server
            .post("/v1/charges")
            .org("acme")
            .key(&format!("in-flight-{attempt}"))
            .json(&charge(100, "tok_slow"));
        let first = request.clone().start().await;
        // A duplicate answered 409 proves the first is running: no sleeping on a guess. If the
        // duplicate won the race instead, it ran the charge itself; try again with a new key.
        let probe = request.send().await;
        if probe.status == 409 {
            break tokio::spawn(first.response());
        }
        assert_eq!(probe.status, 201, "{}", probe.text());
        first.response().await;
    };
    let status = tokio::task::spawn_blocking(move || {
        let status = server.terminate();
        (status, server)
    });
    let response = in_flight.await.expect("request task");
    assert_eq!(response.status, 201, "{}", response.text());
    let (status, server) = status.await.expect("terminate task");
    assert!(
        status.success(),
        "exited with {status}: {}",
        server.output()
    );
    assert!(
        server.output().contains("shutting down"),
        "{}",
        server.output()
    );
}
