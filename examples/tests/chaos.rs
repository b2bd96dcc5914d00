//! An attacker's run against the real binary: two `payments` instances on one PostgreSQL
//! database, each reaching it through a loopback link that keeps being reset (connections
//! dropped, new ones refused) for shorter than the lease, while every charge and payout is sent
//! three times at once, to both instances, and retried until it gets a final answer. The
//! charges and payouts are slow (`tok_slow`, `ba_slow`: 300 ms), so resets land before, during
//! and after their claims, inside their transactions and at their commits.
//!
//! What must hold: every operation ran once (one row each in the database), and every client
//! of a key got the same object.

mod common;
#[allow(dead_code)] // The HTTP proxy is the client tests'.
mod proxy;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{PgDatabase, Server, charge};
use proxy::{TcpProxy, postgres_addr, via_proxy};
use serde_json::{Value, json};
use tokio::task::JoinSet;

/// Logical operations: half charges, half payouts.
const OPERATIONS: usize = 24;
/// Copies of each, sent at once, alternately to the two instances.
const COPIES: usize = 3;
/// How long one copy may keep retrying before the test fails.
const DEADLINE: Duration = Duration::from_secs(45);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn link_resets_across_two_instances_never_run_an_operation_twice() {
    let db = PgDatabase::create().await;
    let links = [
        TcpProxy::start(postgres_addr(&db.url)).await,
        TcpProxy::start(postgres_addr(&db.url)).await,
    ];
    let servers = Arc::new(links.each_ref().map(|link| {
        Server::builder()
            .env("DATABASE_URL", via_proxy(&db.url, link.addr()))
            .env("SLOW_MS", "300")
            .start()
    }));

    // The attacker: resets one instance's link for 200 ms every 350 ms while the clients run.
    let stop = Arc::new(AtomicBool::new(false));
    let switches = links.each_ref().map(TcpProxy::switch);
    let chaos = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut resets = 0;
            while !stop.load(Ordering::Relaxed) {
                let switch = &switches[resets % 2];
                switch.send_replace(false);
                tokio::time::sleep(Duration::from_millis(200)).await;
                switch.send_replace(true);
                tokio::time::sleep(Duration::from_millis(150)).await;
                resets += 1;
            }
            resets
        }
    });

    let mut copies = JoinSet::new();
    for op in 0..OPERATIONS {
        let (path, body) = if op % 2 == 0 {
            // Slow operations hold their claim while links are reset under them.
            ("/v1/charges", charge(100 + op as i64, "tok_slow"))
        } else {
            (
                "/v1/payouts",
                json!({ "amount": 100 + op, "destination": "ba_slow" }),
            )
        };
        for copy in 0..COPIES {
            let servers = servers.clone();
            let (key, body) = (format!("chaos-{op}"), body.clone());
            copies.spawn(async move {
                // Operations start over a few seconds, so resets land before, during and after.
                tokio::time::sleep(Duration::from_millis(150 * op as u64)).await;
                let started = Instant::now();
                loop {
                    let server = &servers[(copy + op) % 2];
                    let response = server
                        .post(path)
                        .org("acme")
                        .key(&key)
                        .json(&body)
                        .send()
                        .await;
                    match response.status {
                        201 => return (key, response.json()["id"].clone()),
                        409 | 503 => {
                            assert!(started.elapsed() < DEADLINE, "{key}: {}", response.text());
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        other => panic!("{key}: unexpected {other}: {}", response.text()),
                    }
                }
            });
        }
    }
    let mut answers: HashMap<String, Vec<Value>> = HashMap::new();
    while let Some(answer) = copies.join_next().await {
        let (key, id) = answer.expect("client task");
        answers.entry(key).or_default().push(id);
    }
    stop.store(true, Ordering::Relaxed);
    let resets = chaos.await.expect("chaos task");
    assert!(resets >= 4, "the links were reset {resets} times");

    for (key, ids) in &answers {
        assert!(
            ids.iter().all(|id| id == &ids[0] && id.is_string()),
            "{key}: clients got different objects: {ids:?}"
        );
    }
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    for (table, expected) in [("charges", OPERATIONS / 2), ("payouts", OPERATIONS / 2)] {
        let rows: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(
            rows as usize, expected,
            "one {table} row per operation, after {resets} resets"
        );
    }
    pool.close().await;
}
