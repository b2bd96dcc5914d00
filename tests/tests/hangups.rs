//! The engine owns each operation from its claim to its stored result, whatever its client does.
//! On every store (MySQL on the MariaDB server, DynamoDB on the moto server the harness
//! starts), through both HTTP adapters (and the programmatic API for hang-ups):
//!
//! - **A client that hangs up never makes an operation run twice.** Handlers insert into a
//!   PostgreSQL table that another session holds locked; their clients give up while every
//!   `INSERT` waits on the lock. When the lock goes, each retry gets the stored answer of the run
//!   its client left, and the table holds one row per key. (Before the engine ran operations on
//!   a task of its own, the hang-up dropped the handler, freed the key, and the `INSERT` already
//!   sent committed anyway: every retry charged again.)
//! - **A claim that lands after its caller gave up is released at once.** The store stalls
//!   (a lock on the records, a held reply) while requests claim: one waits past the store
//!   deadline and is refused with 503, another's client hangs up; neither handler runs. When
//!   the store answers, the claims they made land and are released by their own tokens, so a
//!   retry of either runs within seconds, not after the 30-second lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::routing::post;
use axum::{Json, response::Response};
use http_body_util::BodyExt;
use idem_runtime::store::{BucketStore, MemoryStore};
use idem_runtime::{Builder, Idempotency, idempotent};
use serde_json::{Value, json};
use sqlx::PgPool;
use tower::ServiceExt;

#[path = "hangups/stall.rs"]
mod stall;

use idem_runtime::IdempotencyLayer;
use stall::Stall;

/// Which store keeps the records.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Memory,
    Sqlite,
    Postgres,
    MySql,
    Redis,
    Bucket,
    DynamoDb,
}

/// Which adapter makes the route idempotent.
#[derive(Debug, Clone, Copy)]
enum Face {
    Attribute,
    Layer,
}

#[derive(Clone, FromRef)]
struct App {
    idempotency: Idempotency,
    db: Db,
}

/// The application's own data, in PostgreSQL: one row per charge, in a schema of the test's.
#[derive(Clone)]
struct Db {
    pool: PgPool,
    table: Arc<str>,
    runs: Arc<AtomicUsize>,
}

impl Db {
    async fn charge(&self, body: Value) -> (StatusCode, Json<Value>) {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let insert = format!(
            "INSERT INTO {} (reference) VALUES ($1) RETURNING id",
            self.table
        );
        let id: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(insert))
            .bind(body["reference"].as_str().unwrap_or_default())
            .fetch_one(&self.pool)
            .await
            .expect("insert");
        (StatusCode::CREATED, Json(json!({ "id": id, "run": run })))
    }
}

#[idempotent(scope = "global")]
async fn charge_once(State(db): State<Db>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    db.charge(body).await
}

async fn charge(State(db): State<Db>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    db.charge(body).await
}

fn router(app: App, face: Face) -> Router {
    match face {
        Face::Attribute => Router::new()
            .route("/charges", post(charge_once))
            .with_state(app),
        Face::Layer => Router::new()
            .route("/charges", post(charge))
            .layer(IdempotencyLayer::new(&app.idempotency))
            .with_state(app),
    }
}

/// A store of `kind` behind what makes it stall on demand.
async fn store(kind: Kind, builder: Builder) -> (Builder, Stall) {
    match kind {
        Kind::Memory => {
            let (store, stall) = Stall::wrapping(MemoryStore::new());
            (builder.store(store), stall)
        }
        Kind::Sqlite => {
            let store = idem_tests::sqlite_store().await;
            let stall = Stall::sqlite(&store);
            (builder.store(store), stall)
        }
        Kind::Postgres => {
            let store = idem_tests::postgres_store().await;
            let stall = Stall::postgres(&store);
            (builder.store(store), stall)
        }
        Kind::MySql => {
            let store = idem_tests::mysql::mysql_store().await;
            let stall = Stall::mysql(&store).await;
            (builder.store(store), stall)
        }
        Kind::Redis => {
            let (store, stall) = Stall::redis().await;
            (builder.store(store), stall)
        }
        Kind::Bucket => {
            let bucket = Arc::new(object_store::memory::InMemory::new());
            let store = BucketStore::new(bucket).await.expect("a bucket store");
            let (store, stall) = Stall::wrapping(store);
            (builder.store(store), stall)
        }
        Kind::DynamoDb => {
            let endpoint = idem_tests::dynamodb::dynamodb_endpoint();
            let store = idem_tests::dynamodb::dynamodb_store_builder(&endpoint)
                .build()
                .await
                .expect("moto serves DynamoDB");
            let (store, stall) = Stall::wrapping(store);
            (builder.store(store), stall)
        }
    }
}

async fn app_db() -> Db {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&idem_tests::postgres_url())
        .await
        .expect("the application's database");
    let schema = idem_tests::db::unique_name();
    let ddl = format!(
        "CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.charges (id bigserial PRIMARY KEY, reference text NOT NULL)"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .unwrap();
    Db {
        pool,
        table: format!("{schema}.charges").into(),
        runs: Arc::default(),
    }
}

fn request(key: &str) -> Request<Body> {
    Request::post("/charges")
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(json!({ "reference": key }).to_string()))
        .unwrap()
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    replayed: bool,
    body: Value,
}

async fn send(router: &Router, request: Request<Body>) -> Reply {
    let response: Response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        replayed: parts.headers.contains_key("idempotent-replayed"),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// Sends `key`'s request until it is not answered 409 or 503, within `within`.
async fn settle(router: &Router, key: &str, within: Duration) -> Reply {
    let deadline = Instant::now() + within;
    loop {
        let reply = send(router, request(key)).await;
        let busy = matches!(
            reply.status,
            StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE
        );
        if !busy || Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many `INSERT`s into `table` wait on a lock.
async fn waiting_inserts(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO ' || $1 || '%'",
    )
    .bind(table)
    .fetch_one(pool)
    .await
    .unwrap()
}

const CLIENTS: usize = 10;

/// Locks the charges table, starts `CLIENTS` callers, waits until every one's `INSERT` waits on
/// the lock, then makes them all hang up (their futures dropped, the `INSERT`s already sent)
/// and lets the lock go.
async fn hang_up_under_lock<T: std::fmt::Debug + Send + 'static>(
    db: &Db,
    caller: impl Fn(usize) -> tokio::task::JoinHandle<T>,
) {
    let mut locker = db.pool.begin().await.unwrap();
    let lock = format!("LOCK TABLE {} IN EXCLUSIVE MODE", db.table);
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .execute(&mut *locker)
        .await
        .unwrap();
    let callers: Vec<_> = (0..CLIENTS).map(caller).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting_inserts(&db.pool, &db.table).await < CLIENTS as i64 {
        assert!(Instant::now() < deadline, "every run reaches its INSERT");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for caller in callers {
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
    }
    locker.commit().await.unwrap();
}

/// How many charges the table holds.
async fn rows(db: &Db) -> i64 {
    let count = format!("SELECT count(*) FROM {}", db.table);
    sqlx::query_scalar(sqlx::AssertSqlSafe(count))
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

/// Attack A: ten clients hang up while their handlers' `INSERT`s wait on a locked table.
async fn hang_ups_never_run_twice(kind: Kind, face: Face) {
    let db = app_db().await;
    let (builder, _stall) = store(kind, Idempotency::builder()).await;
    let idempotency = builder.build().unwrap();
    let app = App {
        idempotency,
        db: db.clone(),
    };
    let router = router(app, face);

    hang_up_under_lock(&db, |n| {
        let router = router.clone();
        tokio::spawn(async move { send(&router, request(&format!("k{n}"))).await })
    })
    .await;

    for n in 0..CLIENTS {
        let reply = settle(&router, &format!("k{n}"), Duration::from_secs(10)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "k{n}: {:?}", reply.body);
        assert!(
            reply.replayed,
            "k{n}: the answer of the run its client left"
        );
    }
    assert_eq!(
        rows(&db).await,
        CLIENTS as i64,
        "one charge per key: no duplicate"
    );
    assert_eq!(db.runs.load(Ordering::SeqCst), CLIENTS);
}

/// Attack B: the store stalls while requests claim. One request waits past the store deadline
/// and gets 503; another's client hangs up. Both claims land once the store answers, and are
/// released at once.
async fn late_claims_are_released(kind: Kind, face: Face) {
    let db = app_db().await;
    let builder = Idempotency::builder().store_timeout(Duration::from_secs(1));
    let (builder, stall) = store(kind, builder).await;
    let idempotency = builder.build().unwrap();
    let app = App {
        idempotency,
        db: db.clone(),
    };
    let router = router(app, face);
    // A first request, so that what the store sets up on first use is done.
    assert_eq!(
        send(&router, request("warm")).await.status,
        StatusCode::CREATED
    );
    let runs = db.runs.load(Ordering::SeqCst);

    stall.start().await;
    let left = {
        let router = router.clone();
        tokio::spawn(async move { send(&router, request("left")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    left.abort(); // its client hangs up while its claim waits
    assert!(left.await.unwrap_err().is_cancelled());
    let started = Instant::now();
    let refused = send(&router, request("late")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        refused.body
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "refused within the deadline"
    );
    stall.end().await;

    // The late claims are released once the store answers: retries run well within the
    // 30-second lease that would otherwise hold their keys.
    for key in ["late", "left"] {
        let retry = settle(&router, key, Duration::from_secs(8)).await;
        assert_eq!(retry.status, StatusCode::CREATED, "{key}: {:?}", retry.body);
        assert!(!retry.replayed, "{key}: the first request never ran");
    }
    assert_eq!(
        db.runs.load(Ordering::SeqCst),
        runs + 2,
        "the retries' runs only"
    );
}

/// Attack A on the programmatic API: callers drop `run`'s future (a `select!`, a timeout) while
/// their closures' `INSERT`s wait on the lock. Each retry gets the left run's output.
async fn dropped_operations_never_run_twice(kind: Kind) {
    let db = app_db().await;
    let (builder, _stall) = store(kind, Idempotency::builder()).await;
    let idempotency = builder.build().unwrap();
    let charge = |key: String| {
        let (idempotency, db) = (idempotency.clone(), db.clone());
        async move {
            idempotency
                .operation("charges.create")
                .run(key.clone(), key, move |reference| async move {
                    let (_, Json(charge)) = db.charge(json!({ "reference": reference })).await;
                    Ok::<_, std::convert::Infallible>(charge)
                })
                .await
        }
    };

    hang_up_under_lock(&db, |n| tokio::spawn(charge(format!("op{n}")))).await;

    for n in 0..CLIENTS {
        let deadline = Instant::now() + Duration::from_secs(10);
        let outcome = loop {
            match charge(format!("op{n}")).await {
                Err(idem_runtime::OperationError::InFlight { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => break other.expect("the left run's output"),
            }
        };
        assert!(
            outcome.is_replayed(),
            "op{n}: the output of the run its caller left"
        );
    }
    assert_eq!(
        rows(&db).await,
        CLIENTS as i64,
        "one charge per key: no duplicate"
    );
}

macro_rules! stores {
    ($($kind:ident => $module:ident),* $(,)?) => {
        $(
            mod $module {
                use super::*;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn attribute_hang_ups_never_run_twice() {
                    hang_ups_never_run_twice(Kind::$kind, Face::Attribute).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn layer_hang_ups_never_run_twice() {
                    hang_ups_never_run_twice(Kind::$kind, Face::Layer).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn operation_drops_never_run_twice() {
                    dropped_operations_never_run_twice(Kind::$kind).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn attribute_late_claims_are_released() {
                    late_claims_are_released(Kind::$kind, Face::Attribute).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn layer_late_claims_are_released() {
                    late_claims_are_released(Kind::$kind, Face::Layer).await;
                }
            }
        )*
    };
}

stores!(
    Memory => memory,
    Sqlite => sqlite,
    Postgres => postgres,
    MySql => mysql,
    Redis => redis,
    Bucket => bucket,
    DynamoDb => dynamodb,
);
