//! `Queue::prune`, run with the producers stopped: expired records go, live ones keep answering
//! their task, tasks stay, and in a folder a record keeps its first and newest generations.

use std::time::Duration;

use idem_examples::jobs::{Pruned, Submitted};
use serde_json::json;

use crate::support::{Backend, Harness};

async fn submit(h: &Harness, key: &str, ttl: Duration) -> Submitted {
    h.queue
        .submit("email", &json!({ "key": key }))
        .idempotency_key(key)
        .idempotency_ttl(ttl)
        .await
        .unwrap()
}

/// The generation files of `key`'s record in a folder, oldest first (`None`: no folder left).
fn generations(h: &Harness, key: &str) -> Option<Vec<String>> {
    use sha2::Digest;
    let hash: String = sha2::Sha256::digest(format!("email:{key}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = h.folder.as_ref()?.join(format!("idempotency/email/{hash}"));
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    Some(names)
}

async fn prune_deletes_expired_records_and_superseded_generations(backend: Backend) {
    let h = Harness::new(backend).await;
    let (short, long) = (Duration::from_secs(60), Duration::from_secs(3600));
    let live = submit(&h, "live", long).await;
    submit(&h, "live", long).await; // flips it: generation 2 in a folder
    submit(&h, "gone", short).await;
    submit(&h, "renewed", short).await;
    submit(&h, "renewed", short).await;
    h.clock.advance(short);
    // "renewed" expired and was replaced (generation 3), then flipped (4); "gone" expired.
    let renewed = submit(&h, "renewed", short).await;
    assert!(renewed.created);
    submit(&h, "renewed", short).await;
    let tasks = h.tasks().await;
    assert_eq!(tasks, 4);

    let pruned = h.queue.prune().await.unwrap();
    let superseded = match backend {
        Backend::Folder => 2, // generations 2 and 3 of "renewed"
        _ => 0,
    };
    assert_eq!(
        pruned,
        Pruned {
            records: 1,
            objects: 1 + superseded
        }
    );
    if backend == Backend::Folder {
        assert_eq!(generations(&h, "gone"), None, "the folder went with it");
        assert_eq!(
            generations(&h, "renewed").unwrap(),
            ["0000000001.json", "0000000004.json"],
            "the first (the key's claim) and the newest stay"
        );
        assert_eq!(
            generations(&h, "live").unwrap(),
            ["0000000001.json", "0000000002.json"]
        );
    }
    assert_eq!(h.tasks().await, tasks, "tasks are the consumers'");
    assert_eq!(
        h.queue.prune().await.unwrap(),
        Pruned::default(),
        "nothing left to prune"
    );

    // The live keys answer their tasks; the pruned key is free and makes a new task.
    assert_eq!(submit(&h, "live", long).await.task_id, live.task_id);
    let renewed_again = submit(&h, "renewed", short).await;
    assert_eq!(
        (renewed_again.task_id.as_str(), renewed_again.created),
        (renewed.task_id.as_str(), false)
    );
    assert!(submit(&h, "gone", short).await.created);
    h.finish();
}

#[tokio::test]
async fn memory() {
    prune_deletes_expired_records_and_superseded_generations(Backend::Memory).await;
}

#[tokio::test]
async fn folder() {
    prune_deletes_expired_records_and_superseded_generations(Backend::Folder).await;
}

#[tokio::test]
async fn s3() {
    prune_deletes_expired_records_and_superseded_generations(Backend::S3).await;
}
