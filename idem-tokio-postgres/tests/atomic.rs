//! Atomic mode through `#[idempotent]` handlers that take this crate's `TokioPostgresTx`: the writes and
//! the stored response commit together, in one commit or two, or not at all.

#[path = "support/app.rs"]
mod app;
mod support;

use app::Harness;
use axum::http::StatusCode;
use idem_tokio_postgres::TokioPostgresTx;
use serde_json::json;
use support::{Schemas, pool_at, url};

const PATHS: [&str; 2] = ["/one", "/two"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_commit_with_the_record_and_retries_replay_them() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    for path in PATHS {
        let first = h.send(path, path, json!({ "name": path })).await;
        assert_eq!(first.0, StatusCode::CREATED, "{path}: {:?}", first.1);
        assert!(!first.2);
        let again = h.send(path, path, json!({ "name": path })).await;
        assert_eq!((again.0, &again.1, again.2), (first.0, &first.1, true));
    }
    assert_eq!(h.names().await, ["/one", "/two"]);
    assert_eq!(h.records().await, (0, 2));
    assert_eq!(h.runs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_leaves_nothing_and_its_retry_runs() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    for (stored, path) in PATHS.into_iter().enumerate() {
        let failed = h.send(path, path, json!({ "status": 500 })).await;
        assert_eq!(failed.0, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            h.names().await.len(),
            stored,
            "{path}: its write rolled back"
        );
        let (in_flight, completed) = h.records().await;
        assert_eq!(
            (in_flight, completed),
            (0, stored as i64),
            "{path}: the key is released"
        );
        // A 4xx is an answer: stored with the writes.
        let refused = h.send(path, path, json!({ "status": 422 })).await;
        assert_eq!(refused.0, StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(h.names().await.len(), 2);
    assert_eq!(h.runs(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoints_nest_and_roll_back_alone() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    let reply = h.send("/nested", "k", json!({})).await;
    assert_eq!(reply.0, StatusCode::CREATED, "{:?}", reply.1);
    assert_eq!(h.names().await, ["kept", "outer", "inner"]);
}

/// One commit: a second request of the same operation, with two commits, claims the key (its
/// claim does not take the first's lock) and completes first. The first's completion then finds
/// a record: it fails, its `COMMIT` rolls back, and its write is gone. Two commits: an operator
/// forgets the record (forced) while the handler runs; the fenced `UPDATE` matches nothing and
/// fails, and its `COMMIT` rolls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_fence_rolls_the_writes_back_although_the_commit_was_sent_with_it() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    let gate = h.app.gate.clone();

    let router = h.router.clone();
    let first = tokio::spawn(async move {
        app::send(
            &router,
            "/mixed-one",
            "k",
            json!({ "name": "first", "gate": true }),
        )
        .await
    });
    gate.entered().await;
    let second = h.send("/mixed-two", "k", json!({ "name": "second" })).await;
    assert_eq!(second.0, StatusCode::CREATED, "{:?}", second.1);
    gate.release();
    let first = first.await.unwrap();
    assert_eq!(first.0, StatusCode::CONFLICT, "{:?}", first.1);
    assert_eq!(h.names().await, ["second"]);

    let router = h.router.clone();
    let held = tokio::spawn(async move {
        app::send(
            &router,
            "/two",
            "f",
            json!({ "name": "forgotten", "gate": true }),
        )
        .await
    });
    gate.entered().await;
    let records = h.app.idem.records();
    let filter = idem_core::store::records::RecordFilter::default();
    let in_flight = records.list(&filter, 10).await.unwrap();
    let leased: Vec<_> = in_flight.iter().filter(|r| !r.completed).collect();
    assert_eq!(leased.len(), 1, "{in_flight:?}");
    records.force_forget(&leased[0].key).await.unwrap();
    gate.release();
    let held = held.await.unwrap();
    assert_eq!(held.0, StatusCode::CONFLICT, "{:?}", held.1);
    assert_eq!(
        h.names().await,
        ["second"],
        "the fenced-out write rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_atomic_commits_the_output_with_the_writes() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    let table = h.app.items.table.clone();
    let ship = |n: i64| {
        let table = table.clone();
        h.app.idem.operation("items::ship").run_atomic(
            "ship-1",
            n,
            move |mut tx: TokioPostgresTx, n: i64| async move {
                let sql = format!("INSERT INTO {table} (name) VALUES ($1) RETURNING id");
                let row = tx.query_one(&sql, &[&format!("shipped {n}")]).await?;
                Ok::<i64, idem_tokio_postgres::TxError>(row.get(0))
            },
        )
    };
    let first = ship(1).await.unwrap().into_inner();
    let again = ship(1).await.unwrap().into_inner();
    assert_eq!(first, again);
    assert_eq!(h.names().await, ["shipped 1"]);
}

/// Without an idempotency key the handler still writes in a transaction: committed with a 2xx,
/// rolled back with a 5xx, nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_the_transaction_commits_alone_or_rolls_back() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 4)).await;
    for path in PATHS {
        let failed = h
            .send(path, "", json!({ "name": "failed", "status": 500 }))
            .await;
        assert_eq!(failed.0, StatusCode::INTERNAL_SERVER_ERROR);
        let kept = h.send(path, "", json!({ "name": path })).await;
        assert_eq!(kept.0, StatusCode::CREATED, "{path}: {kept:?}");
    }
    assert_eq!(h.names().await, ["/one", "/two"]);
    assert_eq!(h.records().await, (0, 0));
}

/// Twelve duplicates of a request that holds its one-commit claim are answered 409 while, on a
/// pool of three, a request for another key is served; the first's answer is replayed once it
/// commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_running_request_get_409_while_other_keys_are_served() {
    let schemas = Schemas::default();
    let h = Harness::on(&schemas, pool_at(&url(), 3)).await;
    let gate = h.app.gate.clone();
    let body = json!({ "name": "first", "gate": true });
    let router = h.router.clone();
    let first = {
        let body = body.clone();
        tokio::spawn(async move { app::send(&router, "/one", "flood", body).await })
    };
    gate.entered().await;
    let duplicates: Vec<_> = (0..12)
        .map(|_| {
            let (router, body) = (h.router.clone(), body.clone());
            tokio::spawn(async move { app::send(&router, "/one", "flood", body).await })
        })
        .collect();
    let other = h.send("/one", "other", json!({ "name": "other" })).await;
    assert_eq!(other.0, StatusCode::CREATED, "{other:?}");
    for duplicate in duplicates {
        let reply = duplicate.await.unwrap();
        assert_eq!(reply.0, StatusCode::CONFLICT, "{reply:?}");
    }
    gate.release();
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    let replay = h.send("/one", "flood", body).await;
    assert_eq!((replay.0, replay.2), (StatusCode::CREATED, true));
    assert_eq!(h.names().await, ["first", "other"]);
}
