//! A changed body is a different request, however little it changed: numbers are compared as
//! the decimals they write (no `f64` in between), and a body that repeats a key never shares a
//! fingerprint with one that does not. On every face. And records the previous release wrote
//! (whose fingerprints merged such bodies) still replay to a retry of their request, on the
//! persistent stores with the schema they shipped with.
//!
//! ```text
//! cargo test -p idem-tests --test exact_bodies
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem_runtime::IdempotencyLayer;
use idem_runtime::clock::{Clock, SystemClock};
use idem_runtime::store::Fingerprint;
use idem_runtime::store::RecordKey;
use idem_runtime::store::{Claim, ClaimRequest, Completion, Fence, LeaseToken, Store};
use idem_runtime::{Idempotency, IdempotencyKey, OperationError, StoredResponse, idempotent};
use serde::Serialize;
use sha2::{Digest, Sha256};
use tower::ServiceExt;

/// Every body the handlers ran, by number.
static RUNS: AtomicU64 = AtomicU64::new(0);

#[idempotent(scope = "global", name = "gestures.create")]
async fn gesture(body: Bytes) -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::CREATED,
        format!("run {run}: {}", String::from_utf8_lossy(&body)),
    )
}

async fn plain(body: Bytes) -> (StatusCode, String) {
    let run = RUNS.fetch_add(1, Ordering::SeqCst);
    (
        StatusCode::CREATED,
        format!("run {run}: {}", String::from_utf8_lossy(&body)),
    )
}

/// The attribute's route and the layer's, on one engine.
fn router(idempotency: &Idempotency) -> Router {
    Router::new()
        .route("/attribute", post(gesture))
        .with_state(idempotency.clone())
        .merge(
            Router::new()
                .route("/layer", post(plain))
                .layer(IdempotencyLayer::new(idempotency).scope("global")),
        )
}

async fn send(router: &Router, path: &str, key: &str, body: &str) -> (StatusCode, bool, String) {
    let request = Request::post(path)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        replayed,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

fn memory() -> Idempotency {
    Idempotency::builder()
        .store(idem_runtime::store::MemoryStore::new())
        .build()
        .unwrap()
}

/// The pairs the previous release took for one request.
const NUMBERS: [(&str, &str); 6] = [
    ("18446744073709551616", "18446744073709551617"),
    (
        "123456789012345678901234567890",
        "123456789012345678901234567891",
    ),
    ("-9223372036854775809", "-9223372036854775810"),
    ("0.1", "0.10000000000000000001"),
    ("0.30000000000000004", "0.30000000000000005"),
    ("1e400", "1.0000000000000000000001e400"),
];

#[tokio::test]
async fn numbers_that_differ_as_written_are_different_requests_on_every_face() {
    let idempotency = memory();
    let router = router(&idempotency);
    for path in ["/attribute", "/layer"] {
        for (i, (a, b)) in NUMBERS.iter().enumerate() {
            let key = format!("{path}-{i}");
            let first = format!(r#"{{"action":"wave","x":{a}}}"#);
            let changed = format!(r#"{{"action":"wave","x":{b}}}"#);
            let (status, replayed, _) = send(&router, path, &key, &first).await;
            assert_eq!(
                (status, replayed),
                (StatusCode::CREATED, false),
                "{path} {a}"
            );
            let (status, _, body) = send(&router, path, &key, &changed).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {a} then {b}: {body}"
            );
            // The same number spelled as another decimal is the same request.
            let respelled = format!("{{ \"x\": {a}, \"action\": \"wave\" }}");
            let (status, replayed, _) = send(&router, path, &key, &respelled).await;
            assert_eq!(
                (status, replayed),
                (StatusCode::CREATED, true),
                "{path} {a} respelled"
            );
        }
        let key = format!("{path}-decimal");
        send(&router, path, &key, r#"{"amount":2.5}"#).await;
        let (status, replayed, _) = send(&router, path, &key, r#"{"amount":25e-1}"#).await;
        assert_eq!(
            (status, replayed),
            (StatusCode::CREATED, true),
            "{path}: one decimal"
        );
    }
}

#[derive(Serialize)]
struct Transfer {
    amount: u128,
}

#[tokio::test]
async fn the_programmatic_face_keeps_its_inputs_numbers_exactly() {
    let idempotency = memory();
    let run = |amount: u128| {
        let idempotency = idempotency.clone();
        async move {
            idempotency
                .operation("transfers.create")
                .run("k", Transfer { amount }, |t: Transfer| async move {
                    Ok::<_, std::convert::Infallible>(t.amount.to_string())
                })
                .await
        }
    };
    let first = run(18_446_744_073_709_551_616).await.unwrap();
    assert!(!first.is_replayed());
    assert!(run(18_446_744_073_709_551_616).await.unwrap().is_replayed());
    assert!(
        matches!(
            run(18_446_744_073_709_551_617).await,
            Err(OperationError::Conflict)
        ),
        "a changed amount is another request"
    );
}

#[tokio::test]
async fn a_body_repeating_a_key_never_replays_the_answer_to_one_without() {
    let idempotency = memory();
    let router = router(&idempotency);
    for path in ["/attribute", "/layer"] {
        let key = format!("{path}-dance");
        let (status, replayed, _) = send(&router, path, &key, r#"{"action":"dance"}"#).await;
        assert_eq!((status, replayed), (StatusCode::CREATED, false));
        for repeated in [
            r#"{"action":"wave","action":"dance"}"#,
            r#"{"action":"dance","action":"dance"}"#,
        ] {
            let (status, _, _) = send(&router, path, &key, repeated).await;
            assert_eq!(
                status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{path} {repeated}"
            );
        }
        // The other way round, and a retry of the very bytes still replays.
        let key = format!("{path}-repeated");
        let repeated = r#"{"action":"wave","action":"dance"}"#;
        let (status, replayed, first) = send(&router, path, &key, repeated).await;
        assert_eq!((status, replayed), (StatusCode::CREATED, false));
        let (status, _, _) = send(&router, path, &key, r#"{"action":"dance"}"#).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert_eq!(
            send(&router, path, &key, repeated).await,
            (StatusCode::CREATED, true, first)
        );
    }
}

/// The fingerprint the previous release gave a JSON request: SHA-256 over its version-1 tag,
/// method, path and `json\0` and the canonical form it wrote (numbers through `f64`).
fn previous_fingerprint(path: &str, canonical: &str) -> Fingerprint {
    let mut sha = Sha256::new();
    sha.update(b"idem.fingerprint.v1\0POST\0");
    sha.update(path.as_bytes());
    sha.update(b"\0json\0");
    sha.update(canonical.as_bytes());
    Fingerprint::from_bytes(sha.finalize().into())
}

/// A body whose numbers the previous release rounded, and the canonical form it hashed.
const BODY: &str = r#"{"x":0.1,"n":18446744073709551616}"#;
const PREVIOUS_CANONICAL: &str = r#"{"n":1.8446744073709552e+19,"x":0.1}"#;

/// What the previous release left in `store` for `BODY` sent to `/attribute` under `key`: a
/// completed record, or one whose owner died and whose lease lapsed.
async fn previous_release_record<S: Store>(store: &S, key: &str, completed: bool) {
    let record = RecordKey::derive(
        "global",
        "",
        "gestures.create",
        &IdempotencyKey::parse(key.as_bytes()).unwrap(),
    );
    let fingerprint = previous_fingerprint("/attribute", PREVIOUS_CANONICAL);
    let now = SystemClock.now();
    let lease = if completed { 30 } else { 0 };
    let claim = ClaimRequest {
        key: &record,
        fingerprint: &fingerprint,
        token: LeaseToken::from_i64(7),
        now,
        lease_until: now.after(Duration::from_millis(lease)),
        expires_at: now.after(Duration::from_secs(3600)),
        operation: "gestures.create",
        scope: "global",
        scope_value: "",
        tenant: 0,
    };
    assert_eq!(
        store.claim(claim).await.unwrap(),
        Claim::Acquired { took_over: false }
    );
    if !completed {
        return;
    }
    let response = StoredResponse::new(
        StatusCode::CREATED,
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain"),
        )],
        Bytes::from("charged by the previous release"),
    );
    let completion = Completion {
        payload: &response.encode(),
        status: Some(201),
        completed_at: now,
        expires_at: now.after(Duration::from_secs(3600)),
    };
    let fence = store
        .complete(&record, LeaseToken::from_i64(7), completion)
        .await;
    assert_eq!(fence.unwrap(), Fence::Held);
}

async fn previous_records_replay<S: Store + Clone + 'static>(store: S) {
    let idempotency = Idempotency::builder().store(store.clone()).build().unwrap();
    let router = router(&idempotency);
    let key = |name: &str| format!("{name}-{}", fastrand::u64(..));

    let completed = key("completed");
    previous_release_record(&store, &completed, true).await;
    let replay = (
        StatusCode::CREATED,
        true,
        "charged by the previous release".to_owned(),
    );
    assert_eq!(send(&router, "/attribute", &completed, BODY).await, replay);
    let respelled = r#"{ "n": 18446744073709551616, "x": 1e-1 }"#;
    assert_eq!(
        send(&router, "/attribute", &completed, respelled).await,
        replay,
        "another spelling of the same document, as the previous release compared it"
    );
    let other = r#"{"x":0.2,"n":18446744073709551616}"#;
    let (status, _, _) = send(&router, "/attribute", &completed, other).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "another request");

    // An owner of the previous release died mid-request: a retry takes the record over.
    let abandoned = key("abandoned");
    previous_release_record(&store, &abandoned, false).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (status, replayed, body) = send(&router, "/attribute", &abandoned, BODY).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false), "{body}");
    let again = send(&router, "/attribute", &abandoned, BODY).await;
    assert_eq!(
        again,
        (StatusCode::CREATED, true, body),
        "and its answer is kept"
    );
}

#[tokio::test]
async fn records_the_previous_release_wrote_replay_on_sqlite() {
    let store = idem_tests::db::sqlite_store().await;
    previous_records_replay(store.clone()).await;
    idem_tests::db::remove_sqlite_store(&store).await;
}

#[tokio::test]
async fn records_the_previous_release_wrote_replay_on_postgres() {
    let store = idem_tests::db::postgres_store().await;
    previous_records_replay(store.clone()).await;
    idem_tests::db::drop_postgres_store(&store).await;
}

#[tokio::test]
async fn records_the_previous_release_wrote_replay_on_redis() {
    previous_records_replay(idem_tests::redis::redis_store().await).await;
}
