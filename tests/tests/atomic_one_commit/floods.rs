//! Floods of duplicates of one running request, waiting or refused: other keys keep their
//! connections and run.

use super::*;

/// A flood of duplicates of one slow request: one of them waits on the first's claim in the
/// database, holding a pooled connection; the rest wait in the process, holding none. So a
/// request for another key still gets a connection from a pool of four, and every duplicate
/// replays the first's response once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_waiting_duplicates_does_not_take_the_pool_from_other_keys() {
    let db = TestDatabase::create().await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap();
    let h = Harness::on(db, pool).await;
    let body = json!({ "name": "slow", "gate": true });
    let router = h.router.clone();
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/wait", "slow", body).await }
    });
    h.gate.entered().await; // claimed and wrote, not committed
    let duplicates: Vec<_> = (0..20)
        .map(|_| {
            let (router, body) = (h.router.clone(), body.clone());
            tokio::spawn(async move { send(&router, "/wait", "slow", body).await })
        })
        .collect();
    // One duplicate reaches the database and waits on the claim there.
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock_waiters(&h.pool).await == 0 {
        assert!(
            Instant::now() < deadline,
            "no duplicate waited on the claim"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the rest pile up: without the gate they would take the pool's last connections.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lock_waiters(&h.pool).await,
        1,
        "one duplicate waits in the database"
    );

    let (status, other) = h.send("/one", "other", json!({ "name": "other" })).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "another key still runs: {other}"
    );

    h.gate.open();
    let (status, created) = first.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    for duplicate in duplicates {
        assert_eq!(duplicate.await.unwrap(), (status, created.clone()));
    }
    assert_eq!(
        h.rows().await,
        2,
        "the slow request once, the other key once"
    );
    h.finish().await;
}

/// The same flood in reject mode: every duplicate is refused with 409 while the first runs, the
/// other key still runs, and the first commits once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_rejected_duplicates_gets_409_and_other_keys_still_run() {
    let db = TestDatabase::create().await;
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&db.url)
        .await
        .unwrap();
    let h = Harness::on(db, pool).await;
    let body = json!({ "name": "slow", "gate": true });
    let router = h.router.clone();
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/one", "slow", body).await }
    });
    h.gate.entered().await;
    let duplicates: Vec<_> = (0..20)
        .map(|_| {
            let (router, body) = (h.router.clone(), body.clone());
            tokio::spawn(async move { send(&router, "/one", "slow", body).await })
        })
        .collect();
    for duplicate in duplicates {
        let (status, answer) = duplicate.await.unwrap();
        assert_eq!(status, StatusCode::CONFLICT, "{answer}");
        assert_eq!(answer["code"], "idempotency_key_in_progress");
    }
    let (status, other) = h.send("/one", "other", json!({ "name": "other" })).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "another key still runs: {other}"
    );
    h.gate.open();
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(h.rows().await, 2);
    h.finish().await;
}

/// Sessions of the test's database waiting on a lock.
async fn lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}
