//! Concurrent submits of one key, on every backend: each one's conditional PUT is atomic
//! (`InMemory`, a local folder's hard links, S3 on moto started through `.ci/moto_server.py`).
//! Each proof counts task objects.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use idem_examples::jobs::{Queue, Submitted};
use serde_json::json;

use crate::support::{Backend, Harness};

const PRODUCERS: usize = 50;

/// `PRODUCERS` OS threads, each with its own runtime, released together, submit `key`.
fn submit_from_threads(queue: &Queue, key: &'static str, ttl: Duration) -> Vec<Submitted> {
    let barrier = Arc::new(Barrier::new(PRODUCERS));
    let threads: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            let (queue, barrier) = (queue.clone(), barrier.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                barrier.wait();
                runtime.block_on(async {
                    queue
                        .submit("email", &json!({"to": "ada"}))
                        .idempotency_key(key)
                        .idempotency_ttl(ttl)
                        .await
                        .expect("every concurrent submit succeeds")
                })
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// Every answer names one task, and exactly one answer created it.
fn one_task(answers: &[Submitted]) -> String {
    let ids: HashSet<_> = answers.iter().map(|a| a.task_id.clone()).collect();
    assert_eq!(ids.len(), 1, "one task id for every submit: {ids:?}");
    let created = answers.iter().filter(|a| a.created).count();
    assert_eq!(created, 1, "exactly one submit created the task");
    ids.into_iter().next().unwrap()
}

async fn fifty_threads_one_task(backend: Backend) {
    let h = Harness::new(backend).await;
    let answers = submit_from_threads(&h.producer(), "k", Duration::from_secs(3600));
    one_task(&answers);
    assert_eq!(h.tasks().await, 1);
    h.finish();
}

async fn concurrent_repairs_make_one_task(backend: Backend) {
    let h = Harness::new(backend).await;
    h.recorder.crash_before_next_task();
    let crashed = h
        .queue
        .submit("email", &json!({"to": "ada"}))
        .idempotency_key("k")
        .await;
    assert!(crashed.is_err());
    assert_eq!(h.tasks().await, 0, "a record stuck in creating, no task");
    let answers = submit_from_threads(&h.producer(), "k", Duration::from_secs(3600));
    one_task(&answers);
    assert_eq!(
        h.tasks().await,
        1,
        "every repairer created the same task, once"
    );
    h.finish();
}

async fn concurrent_replacements_of_an_expired_record_make_one_task(backend: Backend) {
    let h = Harness::new(backend).await;
    let ttl = Duration::from_secs(60);
    let old = h
        .queue
        .submit("email", &json!({"to": "ada"}))
        .idempotency_key("k")
        .idempotency_ttl(ttl)
        .await
        .unwrap();
    h.clock.advance(ttl);
    let answers = submit_from_threads(&h.producer(), "k", ttl);
    let new = one_task(&answers);
    assert_ne!(new, old.task_id, "the expired record was replaced once");
    assert_eq!(h.tasks().await, 2);
    h.finish();
}

macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                use crate::support::Backend;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$case(Backend::Memory).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn folder() {
                    super::$case(Backend::Folder).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn s3() {
                    super::$case(Backend::S3).await;
                }
            }
        )+
    };
}

on_every_backend!(
    fifty_threads_one_task,
    concurrent_repairs_make_one_task,
    concurrent_replacements_of_an_expired_record_make_one_task,
);

/// Fifty `jobs submit` processes on one folder: one task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_processes_one_task() {
    let folder = std::env::temp_dir().join(format!("idem-jobs-procs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    let children: Vec<_> = (0..PRODUCERS)
        .map(|_| {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_jobs"))
                .args([
                    "submit",
                    "--type",
                    "email",
                    "--input",
                    r#"{"to":"ada"}"#,
                    "--key",
                    "k",
                ])
                .env("JOBS_STORE", &folder)
                .output()
        })
        .collect();
    let mut answers = Vec::new();
    for child in children {
        let output = tokio::time::timeout(Duration::from_secs(60), child)
            .await
            .unwrap()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        answers.push(Submitted {
            task_id: answer["task_id"].as_str().unwrap().to_owned(),
            created: answer["created"].as_bool().unwrap(),
        });
    }
    one_task(&answers);
    assert_eq!(std::fs::read_dir(folder.join("tasks")).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(folder);
}
