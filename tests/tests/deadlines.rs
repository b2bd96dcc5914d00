//! A transaction the engine lends to an operation carries a deadline: a handler whose writes
//! wait on a lock that does not go is stopped there, its writes rolled back, its record
//! released, and its request answered 503 with `Retry-After`; its connection goes back to the
//! pool, so other requests are served meanwhile, and a retry after the lock runs once.

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use idem_runtime::store::{MySqlStore, PostgresStore, SqliteStore, Store};
use idem_runtime::{AtomicCommits, Idempotency, OperationError, Tx, idempotent};
use idem_tests::{Gate, TestStore};
use serde_json::Value;
use sqlx::{MySql, Postgres, Sqlite};
use tower::ServiceExt;

#[derive(Clone, axum::extract::FromRef)]
struct AppState {
    idempotency: Idempotency,
    gate: Gate,
}

/// The deadline every test sets, and how long a refused request may take at the most.
const DEADLINE: Duration = Duration::from_secs(1);
const REFUSED_WITHIN: Duration = Duration::from_secs(4);

#[idempotent(scope = "global", name = "charges.pg.one")]
async fn pg_charge_one_commit(mut tx: Tx<Postgres>, body: String) -> StatusCode {
    insert(tx.conn().await.unwrap(), &body).await
}

#[idempotent(scope = "global", name = "charges.pg.two", commits = "two")]
async fn pg_charge_two_commits(mut tx: Tx<Postgres>, body: String) -> StatusCode {
    insert(tx.conn().await.unwrap(), &body).await
}

#[idempotent(scope = "global", name = "charges.sqlite")]
async fn sqlite_charge(State(gate): State<Gate>, mut tx: Tx<Sqlite>, body: String) -> StatusCode {
    gate.pass().await; // claimed: the test takes the write lock now
    let Ok(conn) = tx.conn().await else {
        return StatusCode::INTERNAL_SERVER_ERROR;
    };
    let insert = sqlx::query("INSERT INTO charges (reference) VALUES (?)").bind(body);
    match insert.execute(conn).await {
        Ok(_) => StatusCode::CREATED,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn insert(conn: &mut sqlx::PgConnection, reference: &str) -> StatusCode {
    let insert = sqlx::query("INSERT INTO charges (reference) VALUES ($1)").bind(reference);
    match insert.execute(conn).await {
        Ok(_) => StatusCode::CREATED,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// MySQL has no one-commit mode yet: the claim commits first.
#[idempotent(scope = "global", name = "charges.mysql", commits = "two")]
async fn mysql_charge(mut tx: Tx<MySql>, body: String) -> StatusCode {
    let Ok(conn) = tx.conn().await else {
        return StatusCode::INTERNAL_SERVER_ERROR;
    };
    let insert = sqlx::query("INSERT INTO charges (reference) VALUES (?)").bind(body);
    match insert.execute(conn).await {
        Ok(_) => StatusCode::CREATED,
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A read on the store's own pool: served while the pool has a connection to give.
async fn healthz(State(store): State<PostgresStore>) -> StatusCode {
    match sqlx::query("SELECT 1").execute(store.pool()).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The same on a MySQL store's pool.
async fn mysql_healthz(State(store): State<MySqlStore>) -> StatusCode {
    match sqlx::query("SELECT 1").execute(store.pool()).await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn send(router: &Router, uri: &str, key: &str) -> (StatusCode, Option<String>, Value) {
    let request = Request::post(uri)
        .header("idempotency-key", key)
        .body(Body::from(key.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// Sends `key` again after each 409's `Retry-After`, as a client does, at most five times.
async fn retry_while_in_flight(router: &Router, uri: &str, key: &str) -> (StatusCode, Value) {
    for _ in 0..5 {
        let (status, retry_after, body) = send(router, uri, key).await;
        if status != StatusCode::CONFLICT {
            return (status, body);
        }
        let seconds = retry_after.and_then(|s| s.parse().ok()).unwrap_or(1);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }
    panic!("{key} was still in flight after five retries");
}

/// A PostgreSQL store of its own, pool of 4, with a `charges` table in its schema, which is
/// its connections' `search_path`.
async fn postgres() -> PostgresStore {
    let schema = idem_tests::db::unique_name();
    let options = idem_tests::postgres_url()
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::builder(pool)
        .schema(&schema)
        .build()
        .await
        .unwrap();
    let ddl = format!("CREATE TABLE {schema}.charges (reference text NOT NULL)");
    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl))
        .execute(store.pool())
        .await
        .unwrap();
    store
}

async fn pg_lock(store: &PostgresStore) -> sqlx::Transaction<'static, Postgres> {
    let pool = idem_tests::db::postgres_pool().await;
    let mut locker = pool.begin().await.unwrap();
    let lock = format!("LOCK TABLE {}.charges IN EXCLUSIVE MODE", store.schema());
    sqlx::query(sqlx::AssertSqlSafe(lock))
        .execute(&mut *locker)
        .await
        .unwrap();
    locker
}

async fn pg_rows(store: &PostgresStore) -> i64 {
    let count = format!("SELECT count(*) FROM {}.charges", store.schema());
    sqlx::query_scalar(sqlx::AssertSqlSafe(count))
        .fetch_one(store.pool())
        .await
        .unwrap()
}

/// An engine on `store` whose lent transactions stop at `DEADLINE`.
fn with_deadline<S: Store>(store: S) -> Idempotency {
    Idempotency::builder()
        .store(store)
        .transaction_timeout(DEADLINE)
        .build()
        .unwrap()
}

/// Six requests whose `INSERT`s wait on a lock held longer than the deadline, on a pool of
/// four: each is refused with 503 and `Retry-After` soon after the deadline, the pool serves
/// other requests meanwhile, and after the lock each retry runs once.
async fn a_locked_table_ends_in_503_and_frees_the_pool(commits: AtomicCommits) {
    let store = postgres().await;
    let idempotency = with_deadline(store.clone());
    let uri = match commits {
        AtomicCommits::Two => "/two",
        _ => "/one",
    };
    let router: Router = Router::new()
        .route("/one", post(pg_charge_one_commit))
        .route("/two", post(pg_charge_two_commits))
        .with_state(idempotency)
        .merge(
            Router::new()
                .route("/healthz", get(healthz))
                .with_state(store.clone()),
        );
    let locker = pg_lock(&store).await;
    refused_at_the_deadline_while_the_pool_serves(&router, uri).await;
    locker.rollback().await.unwrap();
    each_retry_runs_once(&router, uri).await;
    assert_eq!(
        pg_rows(&store).await,
        6,
        "each retry once, nothing of the stopped runs"
    );
    store.discard().await;
}

/// While the table is locked: six requests on `uri`, each refused with 503 and `Retry-After`
/// after the deadline and well before the lock goes, and `/healthz` answered meanwhile.
async fn refused_at_the_deadline_while_the_pool_serves(router: &Router, uri: &'static str) {
    let started = Instant::now();
    let requests: Vec<_> = (0..6)
        .map(|n| {
            let router = router.clone();
            tokio::spawn(async move { send(&router, uri, &format!("k{n}")).await })
        })
        .collect();
    for request in requests {
        let (status, retry_after, body) = tokio::time::timeout(REFUSED_WITHIN, request)
            .await
            .expect("refused at the deadline, not when the lock goes")
            .unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["code"], "idempotency_store_unavailable");
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    assert!(started.elapsed() >= DEADLINE);
    // The lock is still held, and the pool serves.
    let health = tokio::time::timeout(Duration::from_secs(3), async {
        router
            .clone()
            .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
            .await
            .unwrap()
            .status()
    })
    .await
    .expect("the pool has connections again");
    assert_eq!(health, StatusCode::OK);
}

/// Once the lock is gone: retries follow `Retry-After`, as the answers said (each key is
/// released just after its answer is sent, so a retry at once may still find it held), and
/// each is created.
async fn each_retry_runs_once(router: &Router, uri: &str) {
    for n in 0..6 {
        let (status, body) = retry_while_in_flight(router, uri, &format!("k{n}")).await;
        assert_eq!(status, StatusCode::CREATED, "k{n}: {body}");
    }
}

/// The same on MySQL, its pool of four with the store's session timeouts, and the table held
/// by another session's `LOCK TABLES .. WRITE`: the lent transaction's lock waits are bounded
/// by the deadline too (whole seconds), and the engine stops the handler at the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_locked_table_ends_in_503_and_frees_the_pool() {
    use idem_tests::mysql::{mysql_database, mysql_url_of};
    use sqlx::Connection;
    let database = mysql_database().await;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(4)
        .connect(&mysql_url_of(&database))
        .await
        .unwrap();
    let store = MySqlStore::builder(pool)
        .database(&database)
        .build()
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE charges (reference TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let router: Router = Router::new()
        .route("/mysql", post(mysql_charge))
        .with_state(with_deadline(store.clone()))
        .merge(
            Router::new()
                .route("/healthz", get(mysql_healthz))
                .with_state(store.clone()),
        );
    let mut locker = sqlx::MySqlConnection::connect(&mysql_url_of(&database))
        .await
        .unwrap();
    sqlx::raw_sql("LOCK TABLES charges WRITE")
        .execute(&mut locker)
        .await
        .unwrap();
    refused_at_the_deadline_while_the_pool_serves(&router, "/mysql").await;
    sqlx::raw_sql("UNLOCK TABLES")
        .execute(&mut locker)
        .await
        .unwrap();
    each_retry_runs_once(&router, "/mysql").await;
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM charges")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(rows, 6, "each retry once, nothing of the stopped runs");
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_one_commit_a_locked_table_ends_in_503_and_frees_the_pool() {
    a_locked_table_ends_in_503_and_frees_the_pool(AtomicCommits::One).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_commits_a_locked_table_ends_in_503_and_frees_the_pool() {
    a_locked_table_ends_in_503_and_frees_the_pool(AtomicCommits::Two).await;
}

/// SQLite's one write lock, taken by another connection once the request is claimed: the
/// handler's transaction waits to begin, and is stopped at the deadline rather than after the
/// busy timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_held_write_lock_ends_in_503_at_the_deadline() {
    let store = idem_tests::sqlite_store().await;
    sqlx::query("CREATE TABLE charges (reference TEXT NOT NULL)")
        .execute(store.pool())
        .await
        .unwrap();
    let idempotency = with_deadline(store.clone());
    let gate = Gate::default();
    let router: Router = Router::new()
        .route("/sqlite", post(sqlite_charge))
        .with_state(AppState {
            idempotency,
            gate: gate.clone(),
        });
    let file = store.pool().connect_options().get_filename().to_owned();
    let mut locker = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
        "sqlite://{}",
        file.display()
    ))
    .await
    .unwrap();
    let request = {
        let router = router.clone();
        tokio::spawn(async move { send(&router, "/sqlite", "s1").await })
    };
    gate.entered().await;
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .unwrap();
    let started = Instant::now();
    gate.open();
    let (status, retry_after, body) = request.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(
        started.elapsed() < SqliteStore::BUSY_TIMEOUT,
        "at the deadline, not the busy timeout: {:?}",
        started.elapsed()
    );
    drop(locker);
    gate.open();
    // The record is released just after the answer, once SQLite grants the write lock again:
    // a client that follows `Retry-After` finds it free within a few tries.
    let (status, body) = retry_while_in_flight(&router, "/sqlite", "s1").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    store.discard().await;
}

/// The programmatic API's atomic mode: the closure is stopped, nothing commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_atomic_past_the_deadline_is_a_transaction_timeout() {
    let store = postgres().await;
    let idempotency = with_deadline(store.clone());
    let schema = store.schema().to_owned();
    let ship = |key: &'static str| {
        let schema = schema.clone();
        idempotency.operation("shipments.create").run_atomic(
            key,
            key,
            move |mut tx: Tx<Postgres>, reference: &'static str| async move {
                let insert = format!("INSERT INTO {schema}.charges (reference) VALUES ($1)");
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(reference)
                    .execute(tx.conn().await?)
                    .await?;
                Ok::<_, sqlx::Error>(reference.to_owned())
            },
        )
    };
    let locker = pg_lock(&store).await;
    let stopped = tokio::time::timeout(REFUSED_WITHIN, ship("o1"))
        .await
        .expect("stopped at the deadline");
    assert!(
        matches!(stopped, Err(OperationError::TransactionTimeout { limit }) if limit == DEADLINE),
        "{stopped:?}"
    );
    locker.rollback().await.unwrap();
    // The record is released just after the error is returned: retry a moment later.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!ship("o1").await.unwrap().is_replayed(), "the retry runs");
    assert_eq!(pg_rows(&store).await, 1);
    store.discard().await;
}
