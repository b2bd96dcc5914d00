//! The record's rules, on every backend.

use std::time::Duration;

use idem_examples::jobs::{QueueError, Scope, Status, Submitted};
use object_store::ObjectStoreExt;
use object_store::path::Path;
use serde_json::json;

use crate::support::{Backend, Harness};

macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        $(
            mod $case {
                use crate::support::Backend;

                #[tokio::test]
                async fn memory() {
                    super::$case(Backend::Memory).await;
                }

                #[tokio::test]
                async fn folder() {
                    super::$case(Backend::Folder).await;
                }

                #[tokio::test]
                async fn s3() {
                    super::$case(Backend::S3).await;
                }
            }
        )+
    };
}

on_every_backend!(
    a_retry_gets_the_same_task,
    another_input_is_a_conflict_and_creates_no_task,
    a_crash_between_record_and_task_is_repaired_by_the_next_submit,
    an_expired_record_is_replaced_by_compare_and_swap,
    scopes_separate_keys,
    requests_made_by_a_submit_and_its_retry,
    inputs_keep_their_numbers_and_are_compared_by_them,
);

async fn submit(h: &Harness, key: &str, input: serde_json::Value) -> Result<Submitted, QueueError> {
    h.queue.submit("email", &input).idempotency_key(key).await
}

/// The record of `key` in the task type's scope, read the way the backend stores it.
async fn record(h: &Harness, key: &str) -> idem_examples::jobs::Record {
    use sha2::Digest;
    let hash: String = sha2::Sha256::digest(format!("email:{key}"))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let store = h.recorder.clone();
    let path = match &h.folder {
        // The newest generation.
        Some(folder) => {
            let dir = folder.join(format!("idempotency/email/{hash}"));
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".json"))
                .collect();
            names.sort();
            Path::from(format!(
                "idempotency/email/{hash}/{}",
                names.last().unwrap()
            ))
        }
        None => Path::from(format!("idempotency/email/{hash}.json")),
    };
    let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
    h.recorder.take();
    serde_json::from_slice(&bytes).unwrap()
}

async fn inputs_keep_their_numbers_and_are_compared_by_them(backend: Backend) {
    let h = Harness::new(backend).await;
    let raw = |text: &str| serde_json::value::RawValue::from_string(text.to_owned()).unwrap();
    let submit = |key: &'static str, text: &'static str| {
        let queue = h.queue.clone();
        async move { queue.submit("email", &raw(text)).idempotency_key(key).await }
    };
    let first = submit("big", r#"{"n":18446744073709551616,"x":0.1}"#)
        .await
        .unwrap();
    let task = h.queue.get(&first.task_id).await.unwrap().unwrap();
    assert_eq!(
        task.input.get(),
        r#"{"n":18446744073709551616,"x":0.1}"#,
        "kept as written, not as 1.8446744073709552e19"
    );
    // The same numbers, spelled otherwise: the same input.
    let retry = submit("big", r#"{ "x": 1e-1, "n": 18446744073709551616 }"#)
        .await
        .unwrap();
    assert_eq!(retry.task_id, first.task_id);
    for changed in [
        r#"{"n":18446744073709551617,"x":0.1}"#,
        r#"{"n":18446744073709551616,"x":0.10000000000000000001}"#,
    ] {
        let conflict = submit("big", changed).await;
        assert!(
            matches!(conflict, Err(QueueError::IdempotencyConflict { .. })),
            "{changed}: {conflict:?}"
        );
    }
    assert_eq!(h.tasks().await, 1);
    h.finish();
}

#[tokio::test]
async fn a_record_the_previous_release_wrote_still_answers_its_input() {
    use idem_runtime::store::Fingerprint;
    use object_store::ObjectStoreExt as _;

    let h = Harness::new(Backend::Memory).await;
    let input = json!({"to": "ada", "amount": 12.5});
    let first = submit(&h, "legacy", input.clone()).await.unwrap();
    // Rewrite its input hash as the previous release computed it.
    let mut legacy = record(&h, "legacy").await;
    let document = json!({ "task_type": "email", "input": input });
    let previous = Fingerprint::of_json_v1(&serde_json::to_vec(&document).unwrap());
    legacy.input_hash = previous
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = Path::from(format!("idempotency/email/{}.json", legacy.key_hash));
    let bytes = serde_json::to_vec(&legacy).unwrap();
    h.recorder.put(&path, bytes.into()).await.unwrap();

    let retry = submit(&h, "legacy", json!({"amount": 12.5, "to": "ada"}))
        .await
        .unwrap();
    assert_eq!(retry.task_id, first.task_id);
    let other = submit(&h, "legacy", json!({"to": "ada", "amount": 13})).await;
    assert!(matches!(other, Err(QueueError::IdempotencyConflict { .. })));
    h.finish();
}

async fn a_retry_gets_the_same_task(backend: Backend) {
    let h = Harness::new(backend).await;
    let first = submit(&h, "welcome-ada", json!({"to": "ada", "n": 1}))
        .await
        .unwrap();
    assert!(first.created);
    let unconfirmed = record(&h, "welcome-ada").await;
    assert_eq!(
        (unconfirmed.status, &unconfirmed.task_id),
        (Status::Creating, &first.task_id),
        "a fresh submit does not flip its record: the first retry does"
    );
    // Key order and whitespace do not matter: the input hash is over canonical JSON.
    let retry = submit(&h, "welcome-ada", json!({"n": 1, "to": "ada"}))
        .await
        .unwrap();
    assert_eq!(
        retry,
        Submitted {
            task_id: first.task_id.clone(),
            created: false
        }
    );
    assert_eq!(h.tasks().await, 1);
    let task = h
        .queue
        .get(&first.task_id)
        .await
        .unwrap()
        .expect("the task exists");
    assert_eq!(
        (task.task_type.as_str(), task.input.get()),
        ("email", r#"{"n":1,"to":"ada"}"#)
    );
    let record = record(&h, "welcome-ada").await;
    assert_eq!(record.status, Status::Ready);
    assert_eq!(record.task_id, first.task_id);
    assert_eq!(record.task_path, format!("tasks/{}.json", first.task_id));
    assert_eq!(
        (record.key.as_str(), record.scope.as_str()),
        ("welcome-ada", "email")
    );
    // Another key is another task.
    let other = submit(&h, "welcome-bob", json!({"to": "bob"}))
        .await
        .unwrap();
    assert!(other.created && other.task_id != first.task_id);
    h.finish();
}

async fn another_input_is_a_conflict_and_creates_no_task(backend: Backend) {
    let h = Harness::new(backend).await;
    let first = submit(&h, "k", json!({"to": "ada"})).await.unwrap();
    let conflict = submit(&h, "k", json!({"to": "bob"})).await;
    match conflict {
        Err(QueueError::IdempotencyConflict { task_id }) => assert_eq!(task_id, first.task_id),
        other => panic!("expected IdempotencyConflict, got {other:?}"),
    }
    assert!(
        conflict_message_names_it(),
        "the CLI prints the variant's name"
    );
    assert_eq!(h.tasks().await, 1, "no task for the conflicting submit");
    h.finish();
}

fn conflict_message_names_it() -> bool {
    let error = QueueError::IdempotencyConflict {
        task_id: "t".into(),
    };
    error.to_string().starts_with("IdempotencyConflict")
}

async fn a_crash_between_record_and_task_is_repaired_by_the_next_submit(backend: Backend) {
    let h = Harness::new(backend).await;
    h.recorder.crash_before_next_task();
    let crashed = submit(&h, "k", json!({"to": "ada"})).await;
    assert!(matches!(crashed, Err(QueueError::Store(_))), "{crashed:?}");
    let stuck = record(&h, "k").await;
    assert_eq!(
        stuck.status,
        Status::Creating,
        "the record outlived its producer"
    );
    assert_eq!(h.tasks().await, 0);
    // The next submit of the key creates the task the record names, and flips it.
    let repaired = submit(&h, "k", json!({"to": "ada"})).await.unwrap();
    assert_eq!(
        repaired,
        Submitted {
            task_id: stuck.task_id.clone(),
            created: true
        }
    );
    assert_eq!(record(&h, "k").await.status, Status::Ready);
    let retry = submit(&h, "k", json!({"to": "ada"})).await.unwrap();
    assert_eq!(
        retry,
        Submitted {
            task_id: stuck.task_id,
            created: false
        }
    );
    assert_eq!(h.tasks().await, 1);
    h.finish();
}

async fn an_expired_record_is_replaced_by_compare_and_swap(backend: Backend) {
    let h = Harness::new(backend).await;
    let ttl = Duration::from_secs(3600);
    let send = || {
        h.queue
            .submit("email", &json!({}))
            .idempotency_key("k")
            .idempotency_ttl(ttl)
    };
    let first = send().await.unwrap();
    h.clock.advance(ttl - Duration::from_secs(1));
    assert_eq!(send().await.unwrap().task_id, first.task_id, "still live");
    h.clock.advance(Duration::from_secs(1));
    h.recorder.take();
    let renewed = send().await.unwrap();
    assert!(
        renewed.created && renewed.task_id != first.task_id,
        "expired: a new task"
    );
    let requests = h.recorder.take();
    let replace = match backend {
        // The record's next generation, created only if absent.
        Backend::Folder => "PUT create idempotency",
        _ => "PUT update idempotency",
    };
    assert!(
        requests.iter().any(|r| r == replace) && !requests.iter().any(|r| r.contains("overwrite")),
        "replaced by compare-and-swap, never overwritten: {requests:?}"
    );
    assert_eq!(record(&h, "k").await.task_id, renewed.task_id);
    assert_eq!(
        h.tasks().await,
        2,
        "the old task stays; the key maps to the new one"
    );
    h.finish();
}

async fn scopes_separate_keys(backend: Backend) {
    let h = Harness::new(backend).await;
    let input = json!({"n": 1});
    let email = h
        .queue
        .submit("email", &input)
        .idempotency_key("k")
        .await
        .unwrap();
    // By default the scope is the task type: another type, another key space.
    let sms = h
        .queue
        .submit("sms", &input)
        .idempotency_key("k")
        .await
        .unwrap();
    assert!(sms.created && sms.task_id != email.task_id);
    // The queue scope is one key space for every type: another type is another input.
    let queue = |task_type: &'static str| {
        h.queue
            .submit(task_type, &input)
            .idempotency_key("q")
            .scope(Scope::Queue)
    };
    let q = queue("email").await.unwrap();
    assert!(
        matches!(queue("sms").await, Err(QueueError::IdempotencyConflict { task_id }) if task_id == q.task_id)
    );
    // Custom scopes (tenants) isolate.
    let tenant = |name: &str| {
        h.queue
            .submit("email", &input)
            .idempotency_key("k")
            .scope(Scope::Custom(name.into()))
    };
    let a = tenant("tenant-a").await.unwrap();
    let b = tenant("tenant-b").await.unwrap();
    assert!(a.created && b.created && a.task_id != b.task_id);
    assert_eq!(tenant("tenant-a").await.unwrap().task_id, a.task_id);
    let bad = tenant("../escape").await;
    assert!(
        matches!(bad, Err(QueueError::Invalid { what: "scope", .. })),
        "{bad:?}"
    );
    h.finish();
}

/// The requests of each kind of submit, exactly: the cost the module documents.
async fn requests_made_by_a_submit_and_its_retry(backend: Backend) {
    let h = Harness::new(backend).await;
    let requests = |key: &'static str| {
        let h = &h;
        async move {
            submit(h, key, json!({})).await.unwrap();
            h.recorder.take()
        }
    };
    h.queue.submit("email", &json!({})).await.unwrap();
    assert_eq!(
        h.recorder.take(),
        ["PUT create tasks"],
        "without a key: one PUT"
    );
    let fresh = requests("k").await;
    let first_retry = requests("k").await;
    let later_retry = requests("k").await;
    // A record (generation) and its task, no read, no flip: one PUT more than without a key.
    assert_eq!(fresh, ["PUT create idempotency", "PUT create tasks"]);
    let read: &[&str] = match backend {
        // The newest generation: a LIST, then a GET.
        Backend::Folder => &["LIST idempotency", "GET idempotency"],
        _ => &["GET idempotency"],
    };
    // A compare-and-swap of the record (the flip to ready, the replacement of an expired one):
    // `If-Match` on a conditional store, the next generation's create in a folder.
    let swap = match backend {
        Backend::Folder => "PUT create idempotency",
        _ => "PUT update idempotency",
    };
    let lost_create = "PUT create idempotency";
    let expected = |middle: &[&str], tail: &[&str]| -> Vec<String> {
        std::iter::once(lost_create)
            .chain(read.iter().copied())
            .chain(middle.iter().copied())
            .chain(tail.iter().copied())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        first_retry,
        expected(&["HEAD tasks"], &[swap]),
        "the first retry confirms the task exists and flips the record to ready"
    );
    assert_eq!(
        later_retry,
        expected(&[], &[]),
        "a later retry: the failed create and the read, one GET more than without a key"
    );

    h.recorder.crash_before_next_task();
    submit(&h, "crashed", json!({})).await.unwrap_err();
    h.recorder.take();
    submit(&h, "crashed", json!({})).await.unwrap();
    assert_eq!(
        h.recorder.take(),
        expected(&["HEAD tasks", "PUT create tasks"], &[swap]),
        "a repair creates the missing task, then flips"
    );

    let ttl = Duration::from_secs(60);
    let expiring = || {
        h.queue
            .submit("email", &json!({}))
            .idempotency_key("expiring")
            .idempotency_ttl(ttl)
    };
    expiring().await.unwrap();
    h.clock.advance(ttl);
    h.recorder.take();
    expiring().await.unwrap();
    assert_eq!(
        h.recorder.take(),
        expected(&[swap, "PUT create tasks"], &[]),
        "an expired record is replaced by compare-and-swap, then its new task created"
    );
    h.finish();
}

/// A store that cannot compare-and-swap is refused by name at the first compare-and-swap (a
/// fresh submit needs none: it only creates), never written racily.
#[tokio::test]
async fn conditional_mode_on_a_store_without_updates_is_refused() {
    let folder = std::env::temp_dir().join(format!("idem-jobs-refuse-{}", std::process::id()));
    std::fs::create_dir_all(&folder).unwrap();
    let local = object_store::local::LocalFileSystem::new_with_prefix(&folder).unwrap();
    let queue = idem_examples::jobs::Queue::new(std::sync::Arc::new(local));
    let submit = || queue.submit("email", &json!({})).idempotency_key("k");
    let fresh = submit().await.unwrap();
    assert!(fresh.created);
    let refused = submit().await;
    match refused {
        Err(error @ QueueError::Unsupported { .. }) => {
            assert!(error.to_string().contains("LocalFileSystem"), "{error}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert_eq!(std::fs::read_dir(folder.join("tasks")).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(folder);
}

/// What the S3 tests rely on: the server enforces `If-None-Match: *` and `If-Match` on PUT
/// (checked through the same client the queue uses).
#[tokio::test]
async fn the_s3_server_enforces_put_preconditions() {
    use object_store::{ObjectStore, PutMode, PutOptions, UpdateVersion};
    let endpoint = crate::support::s3_endpoint();
    let bucket = format!("jobs-preconditions-{}", std::process::id());
    reqwest::Client::new()
        .put(format!("{endpoint}/{bucket}"))
        .send()
        .await
        .unwrap();
    let s3 = crate::support::s3(&endpoint, &bucket);
    let path = Path::from("record.json");
    let put = |mode: PutMode, body: &'static str| {
        s3.put_opts(
            &path,
            body.into(),
            PutOptions {
                mode,
                ..PutOptions::default()
            },
        )
    };
    let first = put(PutMode::Create, "1").await.unwrap();
    let again = put(PutMode::Create, "2").await;
    assert!(
        matches!(again, Err(object_store::Error::AlreadyExists { .. })),
        "{again:?}"
    );
    let version = UpdateVersion::from(first);
    put(PutMode::Update(version.clone()), "3").await.unwrap();
    let stale = put(PutMode::Update(version), "4").await;
    assert!(
        matches!(stale, Err(object_store::Error::Precondition { .. })),
        "{stale:?}"
    );
    let body = s3.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"3");
}
