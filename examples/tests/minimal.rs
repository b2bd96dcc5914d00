//! The `minimal` example does what its header says: one idempotent route on a memory store.

mod common;

use common::Server;
use serde_json::json;

#[tokio::test]
async fn minimal_runs_once_per_key_and_replays() {
    let server = Server::builder().bin(env!("CARGO_BIN_EXE_minimal")).start();
    let order = |key: &str, item: &str| {
        server
            .post("/orders")
            .key(key)
            .json(&json!({ "item": item }))
    };

    let first = order("k1", "book").send().await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert!(!first.is_replay());

    let retry = order("k1", "book").send().await;
    assert_eq!(retry.status, 201);
    assert!(retry.is_replay());
    assert_eq!(retry.body, first.body, "the first answer, byte for byte");

    order("k1", "pen")
        .send()
        .await
        .assert_problem(422, "idempotency_key_reused");

    // The handler ran once for `k1`: the next key gets the next id.
    let next = order("k2", "book").send().await;
    assert_eq!(next.json()["id"], first.json()["id"].as_u64().unwrap() + 1);
}
