//! `cargo run -p idem-examples --bin jobs -- <command>`, as documented.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support;

fn jobs(store: &str, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_jobs"));
    command.args(args).env("JOBS_STORE", store);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("the jobs binary runs")
}

fn stdout_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "one line: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The documented session, against `store`.
fn session(store: &str, env: &[(&str, &str)]) {
    let submit = |input: &str| {
        jobs(
            store,
            env,
            &[
                "submit",
                "--type",
                "email",
                "--input",
                input,
                "--key",
                "welcome-ada",
                "--ttl",
                "30d",
            ],
        )
    };
    let first = stdout_json(&submit(r#"{"to": "ada@example.com"}"#));
    assert_eq!(first["created"], true);
    let retry = stdout_json(&submit(r#"{"to":"ada@example.com"}"#));
    assert_eq!(retry["task_id"], first["task_id"]);
    assert_eq!(retry["created"], false);

    let conflict = submit(r#"{"to": "bob@example.com"}"#);
    assert_eq!(conflict.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&conflict.stderr).contains("IdempotencyConflict"));

    let task_id = first["task_id"].as_str().unwrap();
    let task = stdout_json(&jobs(store, env, &["get", task_id]));
    assert_eq!(task["task_id"], task_id);
    assert_eq!(task["task_type"], "email");
    assert_eq!(task["input"], serde_json::json!({"to": "ada@example.com"}));
    assert!(task["created_at"].as_str().unwrap().ends_with('Z'));

    // The input is kept exactly, numbers too: the stored task holds the digits as written.
    let big = r#"{"amount": 18446744073709551616, "rate": 0.10000000000000000001}"#;
    let submitted = stdout_json(&jobs(
        store,
        env,
        &["submit", "--type", "email", "--input", big, "--key", "big"],
    ));
    let task_id = submitted["task_id"].as_str().unwrap();
    let get = jobs(store, env, &["get", task_id]);
    stdout_json(&get);
    assert!(
        String::from_utf8_lossy(&get.stdout)
            .contains(r#""input":{"amount":18446744073709551616,"rate":0.10000000000000000001}"#),
        "{}",
        String::from_utf8_lossy(&get.stdout)
    );
    let changed = r#"{"amount": 18446744073709551617, "rate": 0.10000000000000000001}"#;
    let conflict = jobs(
        store,
        env,
        &[
            "submit", "--type", "email", "--input", changed, "--key", "big",
        ],
    );
    assert_eq!(
        conflict.status.code(),
        Some(3),
        "another amount is another input"
    );

    // Without a key, every submit is a new task.
    let a = stdout_json(&jobs(
        store,
        env,
        &["submit", "--type", "email", "--input", "{}"],
    ));
    let b = stdout_json(&jobs(
        store,
        env,
        &["submit", "--type", "email", "--input", "{}"],
    ));
    assert_ne!(a["task_id"], b["task_id"]);

    // Nothing has expired: a prune deletes no record, and the key still maps to its task.
    let pruned = stdout_json(&jobs(store, env, &["prune"]));
    assert_eq!(pruned["records"], 0);
    let after = stdout_json(&submit(r#"{"to": "ada@example.com"}"#));
    assert_eq!(after["task_id"], first["task_id"]);
}

#[test]
fn the_documented_session_on_a_folder() {
    let folder = std::env::temp_dir().join(format!("idem-jobs-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    session(folder.to_str().unwrap(), &[]);
    assert!(
        folder.join("tasks").is_dir(),
        "the folder was made on first use"
    );
    let _ = std::fs::remove_dir_all(folder);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_session_on_s3() {
    let endpoint = support::s3_endpoint();
    let bucket = format!("jobs-cli-{}", std::process::id());
    reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    let leaked: &'static str = Box::leak(endpoint.clone().into_boxed_str());
    let env = [
        ("AWS_ENDPOINT_URL", leaked),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_REGION", "us-east-1"),
    ];
    let store = format!("s3://{bucket}/queue");
    tokio::task::spawn_blocking(move || session(&store, &env))
        .await
        .unwrap();
    // The objects are under the prefix.
    let s3 = support::s3(&endpoint, &bucket);
    let listed = object_store::ObjectStore::list_with_delimiter(&s3, Some(&"queue/tasks".into()))
        .await
        .unwrap();
    // The session's four tasks: the keyed one, the exact-numbers one, two without a key.
    assert_eq!(listed.objects.len(), 4);
}

#[test]
fn bad_arguments_exit_2() {
    let folder = std::env::temp_dir().join(format!("idem-jobs-bad-{}", std::process::id()));
    let store = folder.to_str().unwrap();
    for args in [
        &["submit", "--type", "email"][..],
        &["submit", "--type", "email", "--input", "{not json"],
        &["submit", "--type", "a/b", "--input", "{}"],
        &[
            "submit",
            "--type",
            "email",
            "--input",
            "{}",
            "--key",
            "has space",
        ],
        &[
            "submit", "--type", "email", "--input", "{}", "--key", "k", "--ttl", "forever",
        ],
        &[
            "submit", "--type", "email", "--input", "{}", "--key", "k", "--ttl", "0s",
        ],
        &["get", "../../etc/passwd"],
        &["launch"],
    ] {
        let output = jobs(store, &[], args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!output.stderr.is_empty());
    }
    assert!(
        !Path::new(&folder).join("tasks").exists(),
        "nothing was written"
    );
    let _ = std::fs::remove_dir_all(folder);
}
