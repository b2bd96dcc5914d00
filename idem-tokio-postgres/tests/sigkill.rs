//! A process killed (SIGKILL) while its handler holds its transaction open, after its write:
//! nothing of the attempt commits, PostgreSQL ends the transaction as the connection drops,
//! and the retry, in another process, runs once: at once with one commit (the claim was in the
//! transaction), once the lease lapses with two (the claim had committed).

#[path = "support/app.rs"]
mod app;
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use app::Harness;
use axum::http::StatusCode;
use idem_tokio_postgres::tokio_postgres::{self, Client, NoTls};
use serde_json::json;
use support::{Schemas, pool_at, url};

const SCHEMA: &str = "ITP_SIGKILL_SCHEMA";
const PATH: &str = "ITP_SIGKILL_PATH";
const LEASE: Duration = Duration::from_secs(1);

/// The child: run by the parent test with its schema and path in the environment, it sends
/// one request whose handler writes, then waits forever in its transaction. Without them, it
/// does nothing.
#[test]
fn sigkill_child() {
    let (Ok(schema), Ok(path)) = (std::env::var(SCHEMA), std::env::var(PATH)) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let h = Harness::at(&schema, pool_at(&url(), 2), |b| b.lease(LEASE)).await;
        h.send(&path, "killed", body()).await;
        unreachable!("the handler waits until the process is killed");
    });
}

fn body() -> serde_json::Value {
    json!({ "name": "killed", "gate": true })
}

/// The child process, killed when dropped, so a failing test leaves none behind.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How many sessions sit in a transaction after the child's `INSERT` into `schema`'s items.
async fn in_transaction(client: &Client, schema: &str) -> i64 {
    let pattern = format!("INSERT INTO \"{schema}\".items%");
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state LIKE 'idle in transaction%' AND query LIKE $1",
            &[&pattern],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Waits until `done` holds, for at most ten seconds.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done().await {
        assert!(Instant::now() < deadline, "{what}: not within ten seconds");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_transaction_commits_nothing_and_the_retry_runs_once() {
    let schemas = Schemas::default();
    let (watcher, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    for path in ["/one", "/two"] {
        let schema = schemas.fresh();
        let h = Harness::at(&schema, pool_at(&url(), 2), |b| b.lease(LEASE)).await;
        let mut child = Killed(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "sigkill_child",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SCHEMA, &schema)
                .env(PATH, path)
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        until("the child's handler writes", async || {
            in_transaction(&watcher, &schema).await == 1
        })
        .await;
        child.0.kill().unwrap(); // SIGKILL
        child.0.wait().unwrap();
        until(
            "PostgreSQL ends the dead process's transaction",
            async || in_transaction(&watcher, &schema).await == 0,
        )
        .await;
        assert!(h.names().await.is_empty(), "{path}: nothing committed");
        let (in_flight, completed) = h.records().await;
        let claimed = usize::from(path == "/two");
        assert_eq!((in_flight, completed), (claimed as i64, 0), "{path}");

        // The retry, in this process: its handler does not wait.
        h.app.gate.release();
        let started = Instant::now();
        let retry = h
            .settle(path, "killed", body(), Duration::from_secs(10))
            .await;
        assert_eq!(retry.0, StatusCode::CREATED, "{path}: {retry:?}");
        assert_eq!(h.names().await, ["killed"], "{path}: ran once");
        assert_eq!(h.runs(), 1, "{path}");
        eprintln!("{path}: the retry succeeded after {:?}", started.elapsed());
    }
}
