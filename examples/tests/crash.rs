//! A crash mid-request (the README's "in flight, owner's lease lapsed (crash): take it over"),
//! over real processes: `payments` is SIGKILLed while a charge runs, a new process starts on the
//! same database (and the same Redis or DynamoDB table, when the records live there), and the
//! client's retry with the same key is answered 409 until the dead owner's lease lapses, then
//! runs the charge once.
//!
//! The same for a payout killed after its row was written (atomic mode): the row dies with the
//! process, so the retry leaves exactly one payout. On PostgreSQL the payout's claim rides in its
//! transaction (one commit) and dies with the connection too: the retry runs at once, with no
//! lease to wait for. On SQLite and MySQL (two commits: the claim commits first) it is taken
//! over once the lease lapses.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::{
    Call, DynamoTable, MyDatabase, PgDatabase, RedisPrefix, Response, STEP_TIMEOUT, ScratchDir,
    Server, ServerBuilder, charge,
};
use serde_json::json;

/// How long the charge runs: long enough to be killed mid-way.
const SLOW_MS: &str = "3000";
/// How soon a dead owner's record may be taken over.
const LEASE_MS: &str = "1500";
/// How long the retries may keep getting 409 after the restart.
const TAKEOVER_DEADLINE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(250);
const SIGKILL: i32 = 9;

/// Where a server keeps its records: in its database, or where this adds (Redis, DynamoDB).
type Records<'a> = &'a dyn Fn(ServerBuilder) -> ServerBuilder;

/// Records in the server's own database.
fn in_the_database(builder: ServerBuilder) -> ServerBuilder {
    builder
}

fn server(database_url: &str, records: Records<'_>) -> Server {
    records(
        Server::builder()
            .env("DATABASE_URL", database_url)
            .env("SLOW_MS", SLOW_MS)
            .env("IDEM_LEASE_MS", LEASE_MS),
    )
    .start()
}

/// Kills the server running a charge, restarts it on the same database (and the same records,
/// wherever `records` keeps them) and retries the charge until the new process takes it over.
async fn a_retry_after_a_crash_charges_once(database_url: &str, records: Records<'_>) {
    let mut first = server(database_url, records);
    let request = first
        .post("/v1/charges")
        .org("acme")
        .key("crash-1")
        .json(&charge(4200, "tok_slow"));

    // Two copies at once: one claims the key and runs for SLOW_MS; the other is answered 409
    // at once, which proves the first is in flight. Its connection stays open until the kill.
    let mut a = tokio::spawn(request.clone().start().await.try_response());
    let mut b = tokio::spawn(request.clone().start().await.try_response());
    let (answered, in_flight) = tokio::select! {
        answered = &mut a => (answered, b),
        answered = &mut b => (answered, a),
    };
    let answered = answered
        .expect("request task")
        .expect("the duplicate is answered");
    answered.assert_problem(409, "idempotency_key_in_progress");

    let status = first.kill();
    assert_eq!(status.signal(), Some(SIGKILL), "{status}");
    let lost = in_flight.await.expect("request task");
    assert!(
        lost.is_none(),
        "the charge answered before the kill: {lost:?}"
    );
    drop(first);

    // A new process on the same database: the dead owner's record is still there, in flight.
    let second = server(database_url, records);
    let request = request.to(&second);
    let (created, conflicts) = retry_until_taken_over(&request).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert!(
        !created.is_replay(),
        "the charge ran in the new process, not replayed from the dead one"
    );
    assert!(
        second
            .output()
            .contains("took over a record whose owner's lease lapsed"),
        "{}",
        second.output()
    );

    let list = second.get("/v1/charges").org("acme").send().await;
    assert_eq!(list.status, 200);
    assert_eq!(
        list.json()["data"],
        serde_json::json!([created.json()]),
        "exactly one charge"
    );

    let replay = request.send().await;
    assert_eq!(replay.status, 201);
    assert!(replay.is_replay(), "Idempotent-Replayed: true");
    assert_eq!(replay.body, created.body, "the same body, byte for byte");
    assert_eq!(replay.replayable_headers(), created.replayable_headers());
    assert_eq!(second.counter("charges.create", "executed").await, 1);
    assert_eq!(
        second.counter("charges.create", "in_progress").await,
        conflicts
    );
}

/// Sends `request` until it is not answered 409 (the dead owner's lease has not lapsed yet);
/// returns that answer and how many 409s came before it.
async fn retry_until_taken_over(request: &Call) -> (Response, u64) {
    let deadline = Instant::now() + TAKEOVER_DEADLINE;
    let mut conflicts = 0;
    loop {
        let response = request.clone().send().await;
        if response.status != 409 {
            eprintln!("409 answers before the takeover: {conflicts}");
            return (response, conflicts);
        }
        response.assert_problem(409, "idempotency_key_in_progress");
        assert!(response.header("retry-after").is_some());
        conflicts += 1;
        assert!(
            Instant::now() < deadline,
            "still 409 after {TAKEOVER_DEADLINE:?}: the crashed owner's record was never taken over"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the server has printed `line`.
async fn wait_for_output(server: &Server, line: &str) {
    let deadline = Instant::now() + STEP_TIMEOUT;
    while !server.output().contains(line) {
        assert!(
            Instant::now() < deadline,
            "the server never printed {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many payout rows the database holds, read past the server.
async fn payout_rows(database_url: &str) -> i64 {
    use sqlx::Connection;
    const COUNT: &str = "SELECT COUNT(*) FROM payouts";
    if database_url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await.unwrap();
        sqlx::query_scalar(COUNT)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    } else if database_url.starts_with("mysql:") {
        let mut conn = sqlx::MySqlConnection::connect(database_url).await.unwrap();
        sqlx::query_scalar(COUNT)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    } else {
        let mut conn = sqlx::PgConnection::connect(database_url).await.unwrap();
        sqlx::query_scalar(COUNT)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

/// Kills the server after a payout's row is written, while the bank is still being asked
/// (`ba_slow`), restarts it on the same database, and retries: one payout row in the end.
async fn a_payout_killed_mid_way_pays_out_once(database_url: &str) {
    let mut first = server(database_url, &in_the_database);
    let request = first
        .post("/v1/payouts")
        .org("acme")
        .key("payout-crash-1")
        .json(&json!({ "amount": 5000, "destination": "ba_slow" }));
    let in_flight = tokio::spawn(request.clone().start().await.try_response());
    // Logged after the row is written, before the bank answers.
    wait_for_output(&first, "sending the payout to the bank").await;
    let status = first.kill();
    assert_eq!(status.signal(), Some(SIGKILL), "{status}");
    let lost = in_flight.await.expect("request task");
    assert!(
        lost.is_none(),
        "the payout answered before the kill: {lost:?}"
    );
    drop(first);

    let second = server(database_url, &in_the_database);
    let request = request.to(&second);
    let (created, conflicts) = retry_until_taken_over(&request).await;
    assert_eq!(created.status, 201, "{}", created.text());
    if database_url.starts_with("postgres:") {
        assert_eq!(
            conflicts, 0,
            "the claim died with the killed process's connection"
        );
    }
    assert!(!created.is_replay(), "the payout ran in the new process");
    assert_eq!(
        payout_rows(database_url).await,
        1,
        "the killed process's payout row must not survive it"
    );
    let replay = request.send().await;
    assert!(replay.is_replay(), "Idempotent-Replayed: true");
    assert_eq!(replay.body, created.body);
    assert_eq!(payout_rows(database_url).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_payout_killed_mid_way_pays_out_once() {
    let dir = ScratchDir::new();
    a_payout_killed_mid_way_pays_out_once(&dir.sqlite_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_payout_killed_mid_way_pays_out_once() {
    let database = PgDatabase::create().await;
    a_payout_killed_mid_way_pays_out_once(&database.url).await;
}

/// MySQL commits the payout's claim on its own first (two commits): the killed process's
/// record stays in flight until its lease lapses, and its row died with its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_payout_killed_mid_way_pays_out_once() {
    let database = MyDatabase::new();
    a_payout_killed_mid_way_pays_out_once(&database.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_retry_after_a_crash_charges_once() {
    let dir = ScratchDir::new();
    a_retry_after_a_crash_charges_once(&dir.sqlite_url(), &in_the_database).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_retry_after_a_crash_charges_once() {
    let database = PgDatabase::create().await;
    a_retry_after_a_crash_charges_once(&database.url, &in_the_database).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_retry_after_a_crash_charges_once() {
    let database = MyDatabase::new();
    a_retry_after_a_crash_charges_once(&database.url, &in_the_database).await;
}

/// The crash comes while the processor authorizes, before any write: without atomic mode too,
/// the retry that takes over charges once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_retry_after_a_crash_charges_once() {
    let (dir, redis) = (ScratchDir::new(), RedisPrefix::new());
    a_retry_after_a_crash_charges_once(&dir.sqlite_url(), &|b| b.redis(&redis)).await;
}

/// The same with the records in DynamoDB: the dead owner's item stays in flight in the table
/// until its lease lapses, and the new process takes it over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_a_retry_after_a_crash_charges_once() {
    let table = DynamoTable::new();
    let dir = ScratchDir::new();
    a_retry_after_a_crash_charges_once(&dir.sqlite_url(), &|b| b.dynamodb(&table)).await;
}
