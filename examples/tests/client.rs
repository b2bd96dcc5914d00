//! The client half, end to end: `idem-client` and the `pay` command line against the real
//! `payments` binary, with the failures clients meet in production made real on loopback.
//!
//! - The "502 storm": a proxy forwards each charge but loses the first answers (closes the
//!   connection, or answers 502). The client retries with the same key, the charge is created
//!   once, and the client ends with the original charge, replayed.
//! - A key reused for another charge is answered 422 and not retried.
//! - A duplicate that finds the first request still running (409) is retried until it
//!   finishes, then gets its answer.
//! - A store outage (PostgreSQL behind a link the test cuts) is answered 503 with
//!   `Retry-After`, which the client honours, and the charge goes through once the store is back.

mod common;
mod proxy;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{PgDatabase, STEP_TIMEOUT, Server, charge};
use idem_client::reqwest::{self, StatusCode};
use idem_client::{Client, IdempotencyKey, RetryNote, RetryPolicy, RetryReason};
use proxy::{Loss, LossyProxy, Seen, TcpProxy, postgres_addr, via_proxy};
use serde_json::Value;

const CHARGES: &str = "/v1/charges";

/// A reqwest client that ignores any proxy the environment names: every test talks to
/// loopback.
fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Quick retries, so a storm takes milliseconds; every retry note is kept.
fn client() -> (Client, Arc<Mutex<Vec<RetryNote>>>) {
    let notes = Arc::new(Mutex::new(Vec::new()));
    let log = notes.clone();
    let client = Client::builder(http())
        .policy(policy())
        .on_retry(move |note| log.lock().unwrap().push(note.clone()))
        .build();
    (client, notes)
}

fn policy() -> RetryPolicy {
    RetryPolicy::default()
        .max_attempts(8)
        .initial_backoff(Duration::from_millis(20))
        .max_backoff(Duration::from_millis(200))
        .max_elapsed(STEP_TIMEOUT)
}

fn charge_request(
    client: &Client,
    base: &str,
    amount: i64,
    source: &str,
) -> reqwest::RequestBuilder {
    client
        .post(format!("{base}{CHARGES}"))
        .bearer_auth("sk_test_acme")
        .json(&charge(amount, source))
}

/// The org's charges, as the server lists them.
async fn charges(server: &Server) -> Vec<Value> {
    let list = server.get(CHARGES).org("acme").send().await;
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["data"].as_array().expect("data").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_502_storm_ends_with_the_original_charge_created_once() {
    let server = Server::start();
    let losses = [Loss::Close, Loss::BadGateway, Loss::Close];
    let proxy = LossyProxy::start(server.addr(), losses.to_vec()).await;
    let (client, notes) = client();

    let outcome = client
        .send(charge_request(&client, &proxy.url(), 2000, "tok_visa"))
        .await
        .expect("an answer in the end");

    assert_eq!(outcome.status(), StatusCode::CREATED, "{}", outcome.text());
    assert!(
        outcome.replayed(),
        "the server's record of the first attempt"
    );
    assert_eq!(outcome.attempts(), 4);
    let key = outcome
        .key()
        .expect("a POST carries a key")
        .as_str()
        .to_owned();
    let seen = |replayed, lost| Seen {
        key: Some(key.clone()),
        status: 201,
        replayed,
        lost,
    };
    assert_eq!(
        proxy.seen(),
        [
            seen(false, Some(Loss::Close)),
            seen(true, Some(Loss::BadGateway)),
            seen(true, Some(Loss::Close)),
            seen(true, None),
        ],
        "one key on every attempt; the server ran the first and replayed the rest"
    );
    let charge: Value = outcome.json().unwrap();
    assert_eq!(charges(&server).await, [charge], "created exactly once");
    assert_eq!(server.counter("charges.create", "executed").await, 1);
    assert_eq!(server.counter("charges.create", "replayed").await, 3);

    let notes = notes.lock().unwrap().clone();
    let reasons: Vec<_> = notes.iter().map(|n| n.reason.clone()).collect();
    assert!(
        matches!(reasons[0], RetryReason::Connection(_)),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[1],
        RetryReason::Status {
            status: StatusCode::BAD_GATEWAY,
            code: None
        }
    );
    assert!(
        matches!(reasons[2], RetryReason::Connection(_)),
        "{reasons:?}"
    );
    assert_eq!(reasons.len(), 3);
}

/// What a run of `pay` printed, and how it exited.
struct Pay {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Pay {
    /// The retry notes on stderr.
    fn notes(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.contains("; retrying in "))
            .collect()
    }
}

/// Runs `pay` against `url` with `args`, bounded by [`STEP_TIMEOUT`].
async fn pay(url: &str, args: &[&str]) -> Pay {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_pay"));
    for var in [
        "http_proxy",
        "HTTP_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "PAYMENTS_URL",
    ] {
        command.env_remove(var);
    }
    command
        .args(args)
        .env("PAYMENTS_URL", url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(STEP_TIMEOUT, command.output())
        .await
        .expect("pay finishes in time")
        .expect("run pay");
    Pay {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

const VISA_2000: [&str; 7] = [
    "charge",
    "--amount",
    "2000",
    "--currency",
    "usd",
    "--source",
    "tok_visa",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_rides_out_a_502_storm() {
    let server = Server::start();
    let losses = [Loss::BadGateway, Loss::Close, Loss::BadGateway];
    let proxy = LossyProxy::start(server.addr(), losses.to_vec()).await;

    let run = pay(&proxy.url(), &VISA_2000).await;

    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let printed: Value = serde_json::from_str(&run.stdout).expect("the charge on stdout");
    assert_eq!(printed["amount"], 2000);
    assert_eq!(charges(&server).await, [printed], "created exactly once");
    let notes = run.notes();
    assert_eq!(notes.len(), 3, "one line per retry:\n{}", run.stderr);
    assert!(
        notes[0].starts_with("pay: attempt 1 got 502 Bad Gateway"),
        "{}",
        notes[0]
    );
    assert!(
        notes[1].starts_with("pay: attempt 2 got no response"),
        "{}",
        notes[1]
    );
    assert!(
        notes[2].starts_with("pay: attempt 3 got 502 Bad Gateway"),
        "{}",
        notes[2]
    );
    assert!(run.stderr.contains("replayed"), "{}", run.stderr);

    let seen = proxy.seen();
    assert_eq!(seen.len(), 4);
    let key = seen[0].key.clone().expect("a key");
    IdempotencyKey::new(key.clone()).expect("a valid key");
    assert!(
        seen.iter().all(|s| s.key.as_ref() == Some(&key)),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reused_for_another_charge_is_422_and_not_retried() {
    let server = Server::start();
    let proxy = LossyProxy::start(server.addr(), Vec::new()).await;
    let with_key = |amount: &'static str| {
        let mut args = VISA_2000.to_vec();
        args[2] = amount;
        args.extend(["--key", "order-1001", "--org", "acme"]);
        args
    };

    let first = pay(&proxy.url(), &with_key("2000")).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let again = pay(&proxy.url(), &with_key("2000")).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(again.stdout, first.stdout, "the same charge, replayed");
    assert!(again.stderr.contains("replayed"), "{}", again.stderr);

    let other = pay(&proxy.url(), &with_key("9900")).await;
    assert_eq!(other.code, Some(1), "{}", other.stderr);
    assert!(other.stdout.is_empty(), "{}", other.stdout);
    assert!(other.stderr.contains("422"), "{}", other.stderr);
    assert!(
        other.stderr.contains("idempotency_key_reused"),
        "the problem document on stderr: {}",
        other.stderr
    );
    assert!(other.notes().is_empty(), "not retried: {}", other.stderr);
    assert_eq!(proxy.seen().len(), 3, "one request per run");
    assert_eq!(charges(&server).await.len(), 1);

    // Bad arguments never reach the server.
    let mut bad = with_key("ten");
    bad.truncate(7);
    let bad = pay(&proxy.url(), &bad).await;
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
    assert!(bad.stderr.contains("--amount"), "{}", bad.stderr);
    assert_eq!(proxy.seen().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_duplicate_is_retried_until_the_first_finishes() {
    // tok_slow runs this long: the client's first attempts find it running.
    let server = Server::builder().env("SLOW_MS", "2000").start();
    let raw = server
        .post(CHARGES)
        .org("acme")
        .key("order-slow")
        .json(&charge(500, "tok_slow"));
    // Two raw copies: one claims the key and runs; the other is answered 409 at once, which
    // proves the first is in flight before the client starts.
    let mut a = tokio::spawn(raw.clone().start().await.response());
    let mut b = tokio::spawn(raw.clone().start().await.response());
    let (conflict, first) = tokio::select! {
        answered = &mut a => (answered, b),
        answered = &mut b => (answered, a),
    };
    conflict
        .expect("request task")
        .assert_problem(409, "idempotency_key_in_progress");

    let (client, notes) = client();
    let key = IdempotencyKey::new("order-slow").unwrap();
    let outcome = client
        .send_with_key(
            charge_request(
                &client,
                &format!("http://{}", server.addr()),
                500,
                "tok_slow",
            ),
            key,
        )
        .await
        .expect("an answer");

    let first = first.await.expect("request task");
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.is_replay());
    assert_eq!(outcome.status(), StatusCode::CREATED, "{}", outcome.text());
    assert!(outcome.replayed());
    assert_eq!(
        outcome.body().as_ref(),
        first.body,
        "the first request's charge"
    );

    let notes = notes.lock().unwrap().clone();
    assert!(
        !notes.is_empty(),
        "the first attempt found the charge running"
    );
    assert_eq!(outcome.attempts() as usize, notes.len() + 1);
    for note in &notes {
        assert_eq!(
            note.reason,
            RetryReason::Status {
                status: StatusCode::CONFLICT,
                code: Some("idempotency_key_in_progress".into())
            }
        );
        assert!(note.from_retry_after, "{note}");
        assert_eq!(
            note.delay,
            Duration::from_secs(1),
            "the server's Retry-After"
        );
    }
    assert_eq!(charges(&server).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_is_retried_after_retry_after() {
    let db = PgDatabase::create().await;
    let link = TcpProxy::start(postgres_addr(&db.url)).await;
    let server = Server::builder()
        .env("DATABASE_URL", via_proxy(&db.url, link.addr()))
        .start();

    // The store is down when the charge is sent; the first retry note brings it back.
    link.set_up(false);
    let notes = Arc::new(Mutex::new(Vec::<RetryNote>::new()));
    let (log, restore) = (notes.clone(), link.switch());
    let client = Client::builder(http())
        .policy(policy())
        .on_retry(move |note| {
            log.lock().unwrap().push(note.clone());
            restore.send_replace(true);
        })
        .build();
    let outcome = client
        .send(charge_request(
            &client,
            &format!("http://{}", server.addr()),
            2000,
            "tok_visa",
        ))
        .await
        .expect("an answer");

    assert_eq!(outcome.status(), StatusCode::CREATED, "{}", outcome.text());
    assert!(!outcome.replayed(), "nothing ran while the store was down");
    let notes = notes.lock().unwrap().clone();
    assert!(!notes.is_empty());
    assert_eq!(outcome.attempts() as usize, notes.len() + 1);
    for note in &notes {
        assert_eq!(
            note.reason,
            RetryReason::Status {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: Some("idempotency_store_unavailable".into())
            },
            "{note}"
        );
        assert!(note.from_retry_after, "{note}");
        assert_eq!(
            note.delay,
            Duration::from_secs(1),
            "the server's Retry-After"
        );
    }
    let charge: Value = outcome.json().unwrap();
    assert_eq!(charges(&server).await, [charge], "created exactly once");
    assert_eq!(server.counter("charges.create", "executed").await, 1);
}
