//! Atomic mode on PostgreSQL in one commit (`commits = "one"`, the default): the claim, the
//! handler's writes and the stored response commit in one transaction, the record written once.
//! Duplicates wait on the claim's lock; a dead connection takes the claim with it; and a fresh
//! request costs fewer round trips than with two commits, counted on the wire.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, response::IntoResponse, response::Response};
use http_body_util::BodyExt;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::PostgresStore;
use idem_runtime::{Idempotency, Tx, idempotent};
use idem_tests::Gate;
use idem_tests::db::TestDatabase;
use serde_json::{Value, json};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres};
use tower::ServiceExt;

#[path = "atomic_one_commit/floods.rs"]
mod floods;
#[path = "atomic_one_commit/locked.rs"]
mod locked;
#[path = "atomic_one_commit/strings.rs"]
mod strings;

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    gate: Gate,
}

/// Inserts one item; `{"gate": true}` waits after the write.
async fn insert(gate: &Gate, tx: &mut Tx<Postgres>, body: &Value) -> Response {
    let name = body["name"].as_str().unwrap_or("item").to_owned();
    let id: i64 = sqlx::query_scalar("INSERT INTO items (name) VALUES ($1) RETURNING id")
        .bind(&name)
        .fetch_one(tx.conn().await.expect("begin"))
        .await
        .expect("insert");
    if body["gate"] == true {
        gate.pass().await;
    }
    (StatusCode::CREATED, Json(json!({ "id": id, "name": name }))).into_response()
}

#[idempotent(scope = "global")]
async fn one(State(gate): State<Gate>, mut tx: Tx<Postgres>, Json(body): Json<Value>) -> Response {
    insert(&gate, &mut tx, &body).await
}

/// Writes inside a nested transaction of its own (a savepoint), commits that, then fails.
#[idempotent(scope = "global")]
async fn nested(mut tx: Tx<Postgres>) -> StatusCode {
    use sqlx::Connection;
    let mut inner = tx.conn().await.unwrap().begin().await.unwrap();
    sqlx::query("INSERT INTO items (name) VALUES ('nested')")
        .execute(&mut *inner)
        .await
        .unwrap();
    inner.commit().await.unwrap();
    StatusCode::INTERNAL_SERVER_ERROR
}

/// One commit, under the operation name `items.mixed`, which [`mixed_two`] shares.
#[idempotent(scope = "global", name = "items.mixed")]
async fn mixed_one(
    State(gate): State<Gate>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    insert(&gate, &mut tx, &body).await
}

/// The same operation with two commits: its claim commits before it runs, as plain mode's
/// and as an older version of the store's one-commit claims did (a rolling upgrade runs both).
#[idempotent(scope = "global", name = "items.mixed", commits = "two")]
async fn mixed_two(
    State(gate): State<Gate>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    insert(&gate, &mut tx, &body).await
}

/// The first call writes, then hands its `Tx` to a task that keeps it for 300 ms after the
/// handler returned (a handler bug); later calls write as usual.
#[idempotent(scope = "global")]
async fn escape(State(gate): State<Gate>, mut tx: Tx<Postgres>) -> Response {
    static ESCAPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if ESCAPED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return insert(&gate, &mut tx, &json!({ "name": "retry" })).await;
    }
    sqlx::query("INSERT INTO items (name) VALUES ('escaped')")
        .execute(tx.conn().await.unwrap())
        .await
        .unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(tx);
    });
    StatusCode::CREATED.into_response()
}

/// Refuses before touching its `Tx`, as a validation error does; the body counts its calls.
#[idempotent(scope = "global")]
async fn refuse(_tx: Tx<Postgres>) -> Response {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let refusal = json!({ "code": "amount_not_positive", "call": call });
    (StatusCode::UNPROCESSABLE_ENTITY, Json(refusal)).into_response()
}

#[idempotent(scope = "global", in_flight = "wait")]
async fn one_waiting(
    State(gate): State<Gate>,
    mut tx: Tx<Postgres>,
    Json(body): Json<Value>,
) -> Response {
    insert(&gate, &mut tx, &body).await
}

#[idempotent(scope = "global", commits = "two")]
async fn two(State(gate): State<Gate>, mut tx: Tx<Postgres>, Json(body): Json<Value>) -> Response {
    insert(&gate, &mut tx, &body).await
}

struct Harness {
    router: Router,
    gate: Gate,
    clock: ManualClock,
    /// The application's pool, which the store shares.
    pool: PgPool,
    db: TestDatabase,
}

impl Harness {
    /// A fresh database, and a pool of 8 connections to it.
    async fn new() -> Self {
        let db = TestDatabase::create().await;
        let pool = db.pool().await;
        Self::on(db, pool).await
    }

    /// The store and the handlers on `pool`, connected to `db`.
    async fn on(db: TestDatabase, pool: PgPool) -> Self {
        sqlx::query("CREATE TABLE items (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        let store = PostgresStore::from_pool(pool.clone()).await.unwrap();
        let clock = ManualClock::new();
        let idem = Idempotency::builder()
            .store(store)
            .clock(clock.clone())
            .scope("org", |caller| caller.metadata("x-org").map(str::to_owned))
            .wait_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let gate = Gate::default();
        let app = App {
            idem,
            gate: gate.clone(),
        };
        let router = Router::new()
            .route("/one", post(one))
            .route("/wait", post(one_waiting))
            .route("/two", post(two))
            .route("/nested", post(nested))
            .route("/mixed-one", post(mixed_one))
            .route("/mixed-two", post(mixed_two))
            .route("/escape", post(escape))
            .route("/refuse", post(refuse))
            .route("/org", post(strings::for_org))
            .with_state(app);
        Self {
            router,
            gate,
            clock,
            pool,
            db,
        }
    }

    async fn send(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
        send(&self.router, path, key, body).await
    }

    async fn rows(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM items")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// What an operator's query sees in flight.
    async fn records_in_flight(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM idem.idempotency_records WHERE state = 'in_flight'",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    async fn finish(self) {
        self.pool.close().await;
        self.db.drop().await;
    }
}

async fn send(router: &Router, path: &str, key: &str, body: Value) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), router.clone().oneshot(request))
        .await
        .expect("request timed out")
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_request_commits_once_and_its_retries_replay() {
    let h = Harness::new().await;
    let (status, first) = h.send("/one", "k", json!({ "name": "a" })).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, replay) = h.send("/one", "k", json!({ "name": "a" })).await;
    assert_eq!((status, &replay), (StatusCode::CREATED, &first));
    let (status, reused) = h.send("/one", "k", json!({ "name": "b" })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reused}");
    assert_eq!(reused["code"], "idempotency_key_reused");
    assert_eq!(h.rows().await, 1);
    h.finish().await;
}

/// The claim's transaction counts as open for sqlx: a transaction the handler begins inside it
/// is a savepoint, whose commit commits nothing yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_transaction_is_a_savepoint_of_the_claims() {
    let h = Harness::new().await;
    let (status, _) = h.send("/nested", "k", json!({})).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(h.rows().await, 0, "the 500 rolled back the nested write");
    let (status, _) = h.send("/nested", "k", json!({})).await;
    assert_eq!(
        status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "the key was released"
    );
    h.finish().await;
}

/// The completion is fenced: when a record of the key committed while the operation ran (a
/// claim that commits on its own, here the same operation with two commits, as during a
/// rolling upgrade), nothing of the one-commit attempt commits, its write included, and it is
/// answered 409 as an owner that lost its record is. The other request's record stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_that_finds_the_key_taken_commits_nothing() {
    let h = Harness::new().await;
    let router = h.router.clone();
    let first = tokio::spawn(async move {
        send(
            &router,
            "/mixed-one",
            "k",
            json!({ "name": "one", "gate": true }),
        )
        .await
    });
    h.gate.entered().await; // claimed and wrote, not committed
    let (status, stored) = h.send("/mixed-two", "k", json!({ "name": "two" })).await;
    assert_eq!(status, StatusCode::CREATED, "{stored}");
    h.gate.open();
    let (status, answer) = first.await.unwrap();
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert_eq!(answer["code"], "idempotency_key_in_progress");
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM items ORDER BY id")
        .fetch_all(&h.pool)
        .await
        .unwrap();
    assert_eq!(names, ["two"], "the one-commit attempt's write rolled back");
    let (status, replay) = h.send("/mixed-two", "k", json!({ "name": "two" })).await;
    assert_eq!((status, &replay), (StatusCode::CREATED, &stored));
    h.finish().await;
}

/// A `Tx` that outlives its handler holds the claim's transaction, which can no longer commit
/// with the response: the request answers 503, nothing of it commits, and the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tx_that_outlives_its_handler_commits_nothing() {
    let h = Harness::new().await;
    let (status, answer) = h.send("/escape", "k", json!({})).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert_eq!(answer["code"], "idempotency_store_unavailable");
    let retry = tokio::time::Instant::now() + Duration::from_secs(5);
    let (status, answer) = loop {
        // 409 while the escaped transaction still holds the claim.
        let (status, answer) = h.send("/escape", "k", json!({})).await;
        if status != StatusCode::CONFLICT || tokio::time::Instant::now() > retry {
            break (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["name"], "retry");
    assert_eq!(h.rows().await, 1, "the escaped write rolled back");
    h.finish().await;
}

/// A handler that answers without touching its `Tx` never takes the claim's transaction: the
/// engine commits its answer with that transaction, and the retry replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_given_without_touching_the_tx_is_stored_and_replayed() {
    let h = Harness::new().await;
    let (status, first) = h.send("/refuse", "k", json!({})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{first}");
    assert_eq!(first["call"], 1);
    let (status, again) = h.send("/refuse", "k", json!({})).await;
    assert_eq!((status, &again), (StatusCode::UNPROCESSABLE_ENTITY, &first));
    assert_eq!(h.records_in_flight().await, 0);
    h.finish().await;
}

/// A committed record that expired but is not swept yet stops the claim's `INSERT`: the
/// ordinary claim then reads it and takes it over, and the request runs afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_record_expired_runs_again() {
    let h = Harness::new().await;
    let (_, first) = h.send("/one", "k", json!({ "name": "a" })).await;
    h.clock.advance(Duration::from_secs(25 * 3600));
    let (status, again) = h.send("/one", "k", json!({ "name": "a" })).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_ne!(
        again["id"], first["id"],
        "a new life of the key ran the handler"
    );
    let (_, replay) = h.send("/one", "k", json!({ "name": "a" })).await;
    assert_eq!(replay, again);
    assert_eq!(h.rows().await, 2);
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_running_request_gets_409_and_sees_no_record() {
    let h = Harness::new().await;
    let router = h.router.clone();
    let body = json!({ "name": "a", "gate": true });
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/one", "k", body).await }
    });
    h.gate.entered().await; // claimed and wrote, not committed
    assert_eq!(h.records_in_flight().await, 0, "the claim writes no record");
    let started = Instant::now();
    let (status, conflict) = h.send("/one", "k", body.clone()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    assert_eq!(conflict["code"], "idempotency_key_in_progress");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused after a short lock wait, not the session's lock timeout"
    );
    h.gate.open();
    let (status, created) = first.await.unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let (_, replay) = h.send("/one", "k", body).await;
    assert_eq!(replay, created);
    assert_eq!(h.rows().await, 1);
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_duplicate_gets_the_replay_once_the_first_commits() {
    let h = Harness::new().await;
    let body = json!({ "name": "a", "gate": true });
    let router = h.router.clone();
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/wait", "k", body).await }
    });
    h.gate.entered().await;
    let router = h.router.clone();
    let waiting = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/wait", "k", body).await }
    });
    // The duplicate is blocked on the first's claim (its lock): the server shows it waiting.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&h.pool)
        .await
        .unwrap();
        if waiting == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the duplicate never waited on the claim"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.gate.open();
    let (first, waited) = (first.await.unwrap(), waiting.await.unwrap());
    assert_eq!(first.0, StatusCode::CREATED);
    assert_eq!(waited, first, "the duplicate replays the first's response");
    assert_eq!(h.rows().await, 1);
    h.finish().await;
}

/// The connection dies while the handler runs (a crashed app's socket closes the same way):
/// the server aborts the transaction, the claim goes with the write, the request fails closed,
/// and the retry runs at once, without waiting for a lease to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dying_mid_handler_takes_the_claim_with_it() {
    let h = Harness::new().await;
    let body = json!({ "name": "a", "gate": true });
    let router = h.router.clone();
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/one", "k", body).await }
    });
    h.gate.entered().await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
         WHERE datname = current_database() AND state = 'idle in transaction'",
    )
    .fetch_all(&h.pool)
    .await
    .unwrap();
    assert_eq!(killed, [true], "one transaction was open: the handler's");
    assert_eq!(h.rows().await, 0, "the write died with the connection");
    h.gate.open();
    let (status, failed) = first.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{failed}");
    assert_eq!(failed["code"], "idempotency_store_unavailable");
    let (status, _) = h.send("/one", "k", json!({ "name": "a" })).await;
    assert_eq!(status, StatusCode::CREATED, "the retry ran at once");
    assert_eq!(h.rows().await, 1, "the business row exists once");
    h.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_commits_the_claim_is_visible_while_the_handler_runs() {
    let h = Harness::new().await;
    let body = json!({ "name": "a", "gate": true });
    let router = h.router.clone();
    let first = tokio::spawn({
        let body = body.clone();
        async move { send(&router, "/two", "k", body).await }
    });
    h.gate.entered().await;
    assert_eq!(h.records_in_flight().await, 1);
    let (status, _) = h.send("/two", "k", body).await;
    assert_eq!(status, StatusCode::CONFLICT);
    h.gate.open();
    assert_eq!(first.await.unwrap().0, StatusCode::CREATED);
    assert_eq!(h.records_in_flight().await, 0);
    assert_eq!(h.rows().await, 1);
    h.finish().await;
}

/// Round trips and statements per fresh request, counted by a proxy that frames the wire
/// protocol (one `ReadyForQuery` per round trip). One pooled connection, so every statement is
/// prepared by the warm-up and the counts are exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commit_takes_two_round_trips_fewer_than_two_commits() {
    let db = TestDatabase::create().await;
    let (server, _) = idem_tests::proxy::postgres_target();
    let (proxy, counters) = idem_bench::pgcount::start(server).await.unwrap();
    let url = db.url.replacen(&host_port(&db.url), &proxy.to_string(), 1);
    let sep = if url.contains('?') { '&' } else { '?' };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        // As `PostgresStore::connect` does: no `Sync` before every acquire.
        .test_before_acquire(false)
        .connect(&format!("{url}{sep}sslmode=disable"))
        .await
        .unwrap();
    let h = Harness::on(db, pool).await;
    const N: u64 = 5;
    let mut per_request = Vec::new();
    for path in ["/one", "/two"] {
        h.send(path, &format!("warm-{path}"), json!({})).await;
        let before = idle(&h.pool, &counters).await;
        for i in 0..N {
            let (status, _) = h.send(path, &format!("{path}-{i}"), json!({})).await;
            assert_eq!(status, StatusCode::CREATED);
        }
        let spent = idle(&h.pool, &counters).await.since(before);
        // The interval also holds the `Sync` the pool sends when `idle` hands its connection
        // back.
        per_request.push((
            path,
            (spent.round_trips - 1) / N,
            (spent.statements) / N,
            (spent.round_trips - 1) % N,
        ));
    }
    eprintln!("(path, round trips, statements, remainder) per fresh request: {per_request:?}");
    // One commit: the claim with its BEGIN; the handler's INSERT; the completion with its
    // COMMIT; and, as the connection goes back to the pool, the roll-back of the empty
    // transaction after the COMMIT with the pool's own check (one flush, two answers).
    assert_eq!(per_request[0], ("/one", 5, 4, 0));
    // Two commits: the claim, and the pool's check as its connection goes back; BEGIN; the
    // INSERT; the completion; COMMIT; the pool's check.
    assert_eq!(per_request[1], ("/two", 7, 5, 0));
    h.finish().await;
}

/// The counters once the pool's one connection is back (its return `Sync` answered).
async fn idle(
    pool: &PgPool,
    counters: &idem_bench::pgcount::Counters,
) -> idem_bench::pgcount::Counts {
    let conn = pool.acquire().await.unwrap();
    let counts = counters.snapshot();
    drop(conn);
    counts
}

/// The `host:port` of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split_once('@').map_or(rest, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap().to_owned()
}
