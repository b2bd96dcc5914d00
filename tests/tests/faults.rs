//! Faults an attacker or a flaky network brings, through real seams: a loopback proxy that cuts
//! the PostgreSQL (and MySQL) link, a table lock that stalls the store, requests dropped mid-flight, a
//! declared body too large to read, a tenant flooding a memory store. Each test fails on an
//! engine that gives up a completion or release when the store blinks, waits on a stalled
//! store, reads a body it must refuse, or lets one tenant fill the store for all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::{MemoryStore, Store};
use idem_runtime::{Idempotency, idempotent};
use idem_tests::Gate;
use idem_tests::TcpProxy as Proxy;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Value, json};
use sqlx::AssertSqlSafe;
use tower::ServiceExt;

#[path = "faults/proxied.rs"]
#[macro_use]
mod proxied;

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    calls: Arc<AtomicUsize>,
    gate: Gate,
}

/// Counts its runs, waits at the gate when asked, answers with the run's number (so a second
/// execution is visible in the response) or with the status the body asks for.
#[idempotent(scope = "org")]
async fn create(
    State(calls): State<Arc<AtomicUsize>>,
    State(gate): State<Gate>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    respond(&calls, &gate, &body).await
}

async fn respond(calls: &AtomicUsize, gate: &Gate, body: &Value) -> (StatusCode, Json<Value>) {
    let run = calls.fetch_add(1, Ordering::SeqCst) + 1;
    if body["gated"] == true {
        gate.pass().await;
    }
    let status = body["status"].as_u64().unwrap_or(201) as u16;
    (
        StatusCode::from_u16(status).unwrap(),
        Json(json!({ "run": run })),
    )
}

/// The same as `create`, on a route of its own (its identity) so its counters are one test's.
#[idempotent(scope = "org")]
async fn tally(
    State(calls): State<Arc<AtomicUsize>>,
    State(gate): State<Gate>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    respond(&calls, &gate, &body).await
}

/// Answers `size` random (incompressible) bytes: a large stored response.
#[idempotent(scope = "org")]
async fn large(Json(body): Json<Value>) -> (StatusCode, Vec<u8>) {
    let size = body["size"].as_u64().unwrap_or(0) as usize;
    (
        StatusCode::CREATED,
        (0..size).map(|_| fastrand::u8(..)).collect(),
    )
}

fn metrics() -> &'static PrometheusHandle {
    idem_tests::metrics::recorder()
}

fn count(outcome: &str) -> u64 {
    count_for("POST /create", outcome)
}

fn count_for(endpoint: &str, outcome: &str) -> u64 {
    idem_tests::metrics::requests(&metrics().render(), endpoint, outcome)
}

fn org(caller: &idem_runtime::Caller<'_>) -> Option<String> {
    caller.metadata("x-org").map(str::to_owned)
}

fn router(idem: Idempotency, calls: Arc<AtomicUsize>, gate: Gate) -> Router {
    Router::new()
        .route("/create", post(create))
        .route("/large", post(large))
        .route("/tally", post(tally))
        // `create` again, under another identity, for a test that counts its outcomes.
        .route("/gone", post(create))
        .with_state(App { idem, calls, gate })
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    replayed: bool,
    body: Value,
}

fn request(path: &str, key: &str, org: &str, body: Value) -> Request<Body> {
    Request::post(path)
        .header("idempotency-key", key)
        .header("x-org", org)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = tokio::time::timeout(Duration::from_secs(20), app.clone().oneshot(request))
        .await
        .expect("a request must not hang")
        .unwrap();
    let status = response.status();
    let (retry_after, replayed) = (
        header(response.headers(), "retry-after"),
        header(response.headers(), "idempotent-replayed"),
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        retry_after,
        replayed: replayed.is_some(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    }
}

fn header(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    Some(headers.get(name)?.to_str().ok()?.to_owned())
}

/// Sends `request` on a task of its own, so the test can act while it runs (or abort it).
fn send_in_background(app: &Router, request: Request<Body>) -> tokio::task::JoinHandle<Reply> {
    let app = app.clone();
    tokio::spawn(async move { send(&app, request).await })
}

/// Sends `request()` until `done` holds (bounded), returning the last reply.
async fn until(
    app: &Router,
    request: impl Fn() -> Request<Body>,
    done: impl Fn(&Reply) -> bool,
) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let reply = send(app, request()).await;
        if done(&reply) || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

on_each_sql_store!(
    a_completion_lost_to_a_store_blip_lands_later_and_the_operation_never_runs_twice,
    mysql_a_completion_lost_to_a_store_blip_lands_later_and_the_operation_never_runs_twice,
    completion_lost_to_a_blip
);

async fn completion_lost_to_a_blip(store: impl Store, proxy: &Proxy) {
    metrics();
    let idem = Idempotency::builder()
        .store(store)
        .scope("org", org)
        .lease(Duration::from_secs(3))
        .store_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Gate::default());
    let app = router(idem, calls.clone(), gate.clone());
    let first = || request("/create", "blip", "acme", json!({ "gated": true }));

    let owner = send_in_background(&app, first());
    gate.entered().await;
    proxy.set_up(false); // the store blinks while the handler runs
    gate.open();
    let answered = owner.await.unwrap();
    assert_eq!(
        answered.status,
        StatusCode::CREATED,
        "the first client gets its answer"
    );
    assert_eq!(answered.body["run"], 1);
    let during = send(&app, first()).await;
    assert_eq!(
        during.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        during.body
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set_up(true);

    // The completion lands once the store is back: duplicates get the first answer, replayed.
    let replay = until(&app, first, |r| r.replayed).await;
    assert_eq!(
        (replay.status, replay.replayed),
        (StatusCode::CREATED, true),
        "{:?}",
        replay.body
    );
    assert_eq!(
        replay.body["run"], 1,
        "every client of the key sees the same response"
    );
    // Past the lease, still the same answer: nothing was taken over.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = send(&app, first()).await;
    assert_eq!(later.body["run"], 1);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the operation ran once");
}

on_each_sql_store!(
    a_release_lost_to_a_store_blip_frees_the_key_as_soon_as_the_store_is_back,
    mysql_a_release_lost_to_a_store_blip_frees_the_key_as_soon_as_the_store_is_back,
    release_lost_to_a_blip
);

async fn release_lost_to_a_blip(store: impl Store, proxy: &Proxy) {
    // One store at a time: the counter read below is the process's, shared by both.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_AT_A_TIME.lock().await;
    metrics();
    let idem = Idempotency::builder()
        .store(store)
        .scope("org", org)
        .store_timeout(Duration::from_secs(1))
        .build()
        .unwrap(); // the default 30 s lease: a stuck record would answer 409 for that long
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Gate::default());
    let app = router(idem, calls.clone(), gate.clone());
    let failing = || {
        request(
            "/create",
            "release",
            "acme",
            json!({ "gated": true, "status": 500 }),
        )
    };
    let before = count("release_failed");

    let owner = send_in_background(&app, failing());
    gate.entered().await;
    proxy.set_up(false);
    gate.open();
    assert_eq!(
        owner.await.unwrap().status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(
        count("release_failed"),
        before + 1,
        "a failed release is counted as such"
    );
    proxy.set_up(true);

    let retry = || request("/create", "release", "acme", json!({ "status": 201 }));
    let reply = until(&app, retry, |r| r.status == StatusCode::CREATED).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the failed run, then the retry's"
    );
}

/// While another session holds `store`'s records table locked, a request fails closed within the
/// store's deadline (503, `Retry-After`) without running; once `unlock` has run, service resumes
/// and the request runs once.
async fn a_locked_table_fails_closed_then_resumes<S>(store: S, unlock: impl Future<Output = ()>)
where
    S: Store + idem_runtime::store::Admin,
{
    metrics();
    let idem = Idempotency::builder()
        .store(store)
        .scope("org", org)
        .store_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let app = router(idem, calls.clone(), Gate::default());
    let stall = || request("/create", "stall", "acme", json!({}));
    let started = Instant::now();
    let reply = send(&app, stall()).await;
    let waited = started.elapsed();
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        reply.body
    );
    assert_eq!(reply.body["code"], "idempotency_store_unavailable");
    assert!(reply.retry_after.is_some());
    assert!(
        waited < Duration::from_secs(3),
        "answered after {waited:?}, not within the deadline"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the handler did not run");
    unlock.await;
    let reply = until(&app, stall, |r| r.status == StatusCode::CREATED).await;
    assert_eq!(
        reply.status,
        StatusCode::CREATED,
        "service resumes once the lock is gone"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1, "run once");
}

/// On PostgreSQL: another session holds the records table (`LOCK TABLE .. ACCESS EXCLUSIVE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_fails_closed_within_the_deadline() {
    let store = idem_tests::postgres_store().await;
    let mut lock = store.pool().begin().await.unwrap();
    let table = format!("\"{}\".idempotency_records", store.schema());
    sqlx::raw_sql(AssertSqlSafe(format!(
        "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *lock)
    .await
    .unwrap();
    let unlock = async move { lock.rollback().await.unwrap() };
    a_locked_table_fails_closed_then_resumes(store.clone(), unlock).await;
    idem_tests::db::drop_postgres_store(&store).await;
}

/// The same on MySQL: another session holds the records table (`LOCK TABLES .. WRITE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_stalled_store_fails_closed_within_the_deadline() {
    use sqlx::{Connection, Executor};
    let store = idem_tests::mysql_store().await;
    let database = store.database().expect("the test store names its database");
    let url = idem_tests::mysql::mysql_url_of(database);
    let mut lock = sqlx::MySqlConnection::connect(&url).await.unwrap();
    lock.execute("LOCK TABLES idempotency_records WRITE")
        .await
        .unwrap();
    let unlock = async move {
        lock.execute("UNLOCK TABLES").await.unwrap();
        lock.close().await.unwrap();
    };
    a_locked_table_fails_closed_then_resumes(store.clone(), unlock).await;
    idem_tests::mysql::drop_mysql_store(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_is_counted_once_as_executed_and_its_retry_replays() {
    metrics();
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .build()
        .unwrap();
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Gate::default());
    let app = router(idem, calls.clone(), gate.clone());
    let count = |outcome| count_for("POST /gone", outcome);
    let gone = || request("/gone", "gone", "acme", json!({ "gated": true }));
    assert_eq!((count("executed"), count("cancelled")), (0, 0));
    let client = send_in_background(&app, gone());
    gate.entered().await;
    client.abort(); // the client goes away mid-request
    assert!(client.await.unwrap_err().is_cancelled());
    gate.open(); // the handler it left runs on
    let retry = until(&app, gone, |r| r.status != StatusCode::CONFLICT).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{:?}", retry.body);
    assert!(retry.replayed, "the left request's response was stored");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
    assert_eq!(count("executed"), 1, "the left request ran to its end");
    assert_eq!(count("replayed"), 1, "the retry");
    assert_eq!(
        count("cancelled"),
        0,
        "a request whose claim settled is not cancelled"
    );
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_read() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .build()
        .unwrap();
    let app = router(idem, Arc::default(), Gate::default());
    // A body that never arrives: reading it would hang.
    let body = Body::new(Never);
    let request = Request::post("/create")
        .header("idempotency-key", "huge")
        .header("x-org", "acme")
        .header("content-type", "application/json")
        .header("content-length", "104857600")
        .body(body)
        .unwrap();
    let reply = send(&app, request).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.body["code"], "payload_too_large");
}

/// A request body whose bytes never come.
struct Never;

impl http_body::Body for Never {
    type Data = axum::body::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

#[tokio::test]
async fn one_tenant_cannot_fill_the_memory_store_for_all() {
    let store = MemoryStore::new().max_bytes(8 << 20).tenant_share(0.5);
    let idem = Idempotency::builder()
        .store(store.clone())
        .scope("org", org)
        .build()
        .unwrap();
    let app = router(idem, Arc::default(), Gate::default());
    let mega = json!({ "size": 1 << 20 });
    let mut refused = None;
    for i in 0..20 {
        let reply = send(
            &app,
            request("/large", &format!("flood-{i}"), "mallory", mega.clone()),
        )
        .await;
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            refused = Some((i, reply));
            break;
        }
        assert_eq!(reply.status, StatusCode::CREATED);
    }
    let (i, reply) = refused.expect("the flooding tenant runs out of its share");
    assert!(
        (3..=5).contains(&i),
        "refused after {i} responses of 1 MiB in a 4 MiB share"
    );
    assert_eq!(reply.body["code"], "idempotency_store_full");
    let retry_after: u64 = reply.retry_after.unwrap().parse().unwrap();
    assert!(
        retry_after > 86_000,
        "room frees when the first record expires: {retry_after} s"
    );
    assert!(
        store.bytes() <= (5 << 20) + 4096,
        "{} bytes held",
        store.bytes()
    );
    // Another tenant still has its room.
    let other = send(&app, request("/large", "fair", "acme", mega)).await;
    assert_eq!(other.status, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_running_longer_than_its_lease_keeps_it() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Gate::default());
    let app = router(idem, calls.clone(), gate.clone());
    let slow = || request("/create", "slow", "acme", json!({ "gated": true }));
    let owner = send_in_background(&app, slow());
    gate.entered().await;
    // Four leases long: the running owner renews, so every duplicate meanwhile is told to wait.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let duplicate = send(&app, slow()).await;
        assert_eq!(
            duplicate.status,
            StatusCode::CONFLICT,
            "{:?}",
            duplicate.body
        );
    }
    gate.open();
    assert_eq!(owner.await.unwrap().status, StatusCode::CREATED);
    let replay = send(&app, slow()).await;
    assert!(replay.replayed);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counters_add_up_to_the_requests_sent() {
    metrics();
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org)
        .build()
        .unwrap();
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Gate::default());
    let app = router(idem, calls, gate.clone());
    let req = |key: &str, body: Value| request("/tally", key, "acme", body);
    let mut sent = 0;
    let mut expect = |reply: Reply, status: StatusCode| {
        assert_eq!(reply.status, status, "{:?}", reply.body);
        sent += 1;
    };
    expect(send(&app, req("a", json!({}))).await, StatusCode::CREATED); // executed
    expect(send(&app, req("a", json!({}))).await, StatusCode::CREATED); // replayed
    expect(
        send(&app, req("a", json!({ "x": 1 }))).await,
        StatusCode::UNPROCESSABLE_ENTITY,
    ); // reused
    expect(
        send(&app, req("bad key", json!({}))).await,
        StatusCode::BAD_REQUEST,
    ); // invalid
    let unscoped = Request::post("/tally")
        .header("idempotency-key", "u")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    expect(send(&app, unscoped).await, StatusCode::UNAUTHORIZED); // invalid
    expect(
        send(&app, req("b", json!({ "status": 503 }))).await,
        StatusCode::SERVICE_UNAVAILABLE,
    ); // released
    // In flight: the owner waits at the gate while a duplicate is refused, then its client
    // gives up; the handler runs on, and is counted when it finishes.
    let owner = send_in_background(&app, req("c", json!({ "gated": true })));
    gate.entered().await;
    expect(
        send(&app, req("c", json!({ "gated": true }))).await,
        StatusCode::CONFLICT,
    ); // in_progress
    owner.abort(); // executed, once the gate opens
    assert!(owner.await.unwrap_err().is_cancelled());
    sent += 1;
    gate.open();

    let outcomes = [
        "executed",
        "replayed",
        "in_progress",
        "reused",
        "invalid",
        "released",
        "release_failed",
        "cancelled",
        "store_error",
    ];
    let counted = || -> u64 { outcomes.iter().map(|o| count_for("POST /tally", o)).sum() };
    let deadline = Instant::now() + Duration::from_secs(5);
    while counted() < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counted(), sent, "every request is counted once");
    assert_eq!(count_for("POST /tally", "executed"), 2, "a and the left c");
    assert_eq!(count_for("POST /tally", "invalid"), 2);
}
