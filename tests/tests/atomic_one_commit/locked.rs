//! A records table another session holds locked is the store failing (503), not a request in
//! flight (409): the one-commit claim's wait on the table is told apart from its wait on the
//! key's lock, and the handler runs nothing until the table is free.

use axum::http::StatusCode;
use serde_json::json;

use super::Harness;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_records_table_is_503_not_409_and_runs_nothing() {
    let h = Harness::new().await;
    let mut lock = h.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE idem.idempotency_records IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let (status, body) = h.send("/one", "locked", json!({ "name": "a" })).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "idempotency_store_unavailable", "{body}");
    lock.rollback().await.unwrap();
    assert_eq!(h.rows().await, 0, "the handler wrote nothing");

    let (status, body) = h.send("/one", "locked", json!({ "name": "a" })).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(h.rows().await, 1);
    h.finish().await;
}
