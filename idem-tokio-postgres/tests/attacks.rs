//! The attacks #54 lists, on atomic mode over tokio-postgres: a lock on the records table, a
//! lock on the application's table, clients that hang up, and claims that land late.

#[path = "support/app.rs"]
mod app;
mod support;

use std::time::{Duration, Instant};

use app::{Harness, send};
use axum::http::StatusCode;
use idem_tokio_postgres::tokio_postgres::{self, Client, NoTls};
use serde_json::json;
use support::{Schemas, pool_at, url};

const PATHS: [&str; 2] = ["/one", "/two"];

/// A session of its own holding `table` locked in `mode` until it is dropped.
async fn lock(table: &str, mode: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(&url(), NoTls).await.unwrap();
    tokio::spawn(connection);
    let sql = format!("BEGIN; LOCK TABLE {table} IN {mode} MODE");
    client.batch_execute(&sql).await.unwrap();
    client
}

/// Another session holds the records table: a request that cannot claim is answered 503 with
/// `Retry-After` at the store's deadline, the handler never runs, and once the lock goes every
/// retry runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_records_table_answers_503_at_the_store_deadline() {
    let schemas = Schemas::default();
    let h = Harness::with(&schemas, pool_at(&url(), 4), |b| {
        b.store_timeout(Duration::from_millis(500))
    })
    .await;
    let records = format!("\"{}\".idempotency_records", h.store.schema());
    let locker = lock(&records, "ACCESS EXCLUSIVE").await;
    for path in PATHS {
        let started = Instant::now();
        let reply = h.send(path, path, json!({ "name": path })).await;
        let waited = started.elapsed();
        assert_eq!(
            reply.0,
            StatusCode::SERVICE_UNAVAILABLE,
            "{path}: {reply:?}"
        );
        assert!(waited < Duration::from_secs(3), "{path}: after {waited:?}");
    }
    assert_eq!(h.runs(), 0, "no handler ran");
    drop(locker);
    for path in PATHS {
        let body = json!({ "name": path });
        let reply = h.settle(path, path, body, Duration::from_secs(10)).await;
        assert_eq!(reply.0, StatusCode::CREATED, "{path}: {reply:?}");
    }
    assert_eq!(h.names().await, ["/one", "/two"]);
    assert_eq!(h.runs(), 2);
}

/// Another session holds the application's table longer than the transaction's deadline: each
/// handler's `INSERT` waits, each request is stopped at the deadline and answered 503, on a pool
/// of two that these requests never exhaust, and once the lock goes each retry runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_application_table_stops_the_handler_at_its_deadline() {
    let schemas = Schemas::default();
    let h = Harness::with(&schemas, pool_at(&url(), 2), |b| {
        b.transaction_timeout(Duration::from_millis(500))
    })
    .await;
    let locker = lock(&h.app.items.table, "EXCLUSIVE").await;
    let keys: Vec<_> = PATHS
        .into_iter()
        .flat_map(|path| (0..3).map(move |i| (path, format!("{path}-{i}"))))
        .collect();
    for (path, key) in &keys {
        let started = Instant::now();
        let reply = h.send(path, key, json!({ "name": key })).await;
        let waited = started.elapsed();
        assert_eq!(reply.0, StatusCode::SERVICE_UNAVAILABLE, "{key}: {reply:?}");
        assert!(
            reply.1["code"] == "idempotency_store_unavailable",
            "{reply:?}"
        );
        assert!(
            waited < Duration::from_secs(3),
            "{key}: answered after {waited:?}"
        );
    }
    drop(locker);
    for (path, key) in &keys {
        let body = json!({ "name": key });
        let reply = h.settle(path, key, body, Duration::from_secs(10)).await;
        assert_eq!(reply.0, StatusCode::CREATED, "{key}: {reply:?}");
    }
    assert_eq!(h.names().await.len(), keys.len(), "each retry ran once");
    assert_eq!(h.records().await, (0, keys.len() as i64));
}

/// Clients hang up while their handlers hold their transactions: each handler runs on to its
/// end, its writes commit with its response, and the retry gets that response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_leaves_its_request_to_commit() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    let gate = h.app.gate.clone();
    for path in PATHS {
        let router = h.router.clone();
        let body = json!({ "name": path, "gate": true });
        let client = tokio::spawn(async move { send(&router, path, path, body).await });
        gate.entered().await;
        client.abort();
        assert!(client.await.unwrap_err().is_cancelled());
        gate.release();
        let body = json!({ "name": path, "gate": true });
        let retry = h.settle(path, path, body, Duration::from_secs(10)).await;
        assert_eq!(retry.0, StatusCode::CREATED, "{path}: {retry:?}");
        assert!(retry.2, "{path}: the left request's answer, replayed");
    }
    assert_eq!(h.names().await, ["/one", "/two"]);
    assert_eq!(h.runs(), 2);
}

/// Claims sent while the records table is locked land only once the lock goes, after their
/// callers were answered 503 or hung up: they are released (or rolled back) at once, so
/// retries run well within the lease that would otherwise hold the keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_that_land_late_are_released() {
    let schemas = Schemas::default();
    let h = Harness::with(&schemas, pool_at(&url(), 8), |b| {
        b.store_timeout(Duration::from_millis(500))
            .lease(Duration::from_secs(60))
    })
    .await;
    for path in PATHS {
        assert_eq!(h.send(path, "warm", json!({})).await.0, StatusCode::CREATED);
    }
    let records = format!("\"{}\".idempotency_records", h.store.schema());
    let locker = lock(&records, "ACCESS EXCLUSIVE").await;
    for path in PATHS {
        let router = h.router.clone();
        let left = tokio::spawn(async move { send(&router, path, "left", json!({})).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        left.abort(); // its client hangs up while its claim waits
        let late = h.send(path, "late", json!({})).await;
        assert_eq!(late.0, StatusCode::SERVICE_UNAVAILABLE, "{path}: {late:?}");
    }
    drop(locker);
    let started = Instant::now();
    for path in PATHS {
        for key in ["left", "late"] {
            let reply = h
                .settle(path, key, json!({}), Duration::from_secs(10))
                .await;
            assert_eq!(reply.0, StatusCode::CREATED, "{path} {key}: {reply:?}");
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not held by a lease"
    );
    assert_eq!(h.records().await.0, 0, "nothing left in flight");
}
