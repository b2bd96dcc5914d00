//! What the MySQL store promises beyond the conformance suite, on the real MariaDB server:
//!
//! - No isolation level makes two owners: the whole conformance suite (concurrent claimers of an
//!   absent record, concurrent takeovers of a lapsed one, fencing) passes on pools whose sessions
//!   run REPEATABLE READ (InnoDB's default, with its gap locks), READ COMMITTED and
//!   SERIALIZABLE.
//! - A locked records table fails closed: a request whose claim waits on a table another session
//!   holds is answered 503 at the store timeout, and the key works once the lock is gone.
//! - Values a `BLOB` or one statement could not hold are never answered "retry": a scope value
//!   over 64 KiB is kept whole, and a response larger than the server's `max_allowed_packet` is
//!   sent to its caller and answered `409 idempotency_response_too_large` on its retries, never
//!   run again.
//!
//! ```text
//! cargo nextest run -p idem-tests --test mysql_store
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem_core::testing::conformance;
use idem_runtime::store::MySqlStore;
use idem_runtime::store::records::RecordFilter;
use idem_runtime::{Idempotency, IdempotencyLayer};
use idem_tests::mysql::{drop_database, mysql_database, mysql_url_of};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::{AssertSqlSafe, Connection, Executor};
use tower::ServiceExt;

/// Every conformance case on stores whose pools run `level`, each in a database of its own.
async fn the_contract_holds_at(level: &'static str) {
    let databases = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let made = databases.clone();
    let report = conformance::run_all(move || {
        let made = made.clone();
        async move {
            let database = mysql_database().await;
            made.lock().unwrap().push(database.clone());
            let pool = MySqlPoolOptions::new()
                .max_connections(8)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        let set = format!("SET SESSION TRANSACTION ISOLATION LEVEL {level}");
                        conn.execute(AssertSqlSafe(set)).await.map(drop)
                    })
                })
                .connect(&mysql_url_of(&database))
                .await
                .unwrap();
            MySqlStore::from_pool(pool).await.unwrap()
        }
    })
    .await;
    let made = std::mem::take(&mut *databases.lock().unwrap());
    for database in made {
        drop_database(&database).await;
    }
    assert!(report.skipped.is_empty(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeatable_read_never_makes_two_owners() {
    the_contract_holds_at("REPEATABLE READ").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_never_makes_two_owners() {
    the_contract_holds_at("READ COMMITTED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn serializable_never_makes_two_owners() {
    the_contract_holds_at("SERIALIZABLE").await;
}

async fn post_with_key(router: &Router, key: &str) -> StatusCode {
    let request = Request::post("/charges")
        .header("idempotency-key", key)
        .body(Body::from("{}"))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(60), router.clone().oneshot(request))
        .await
        .expect("the request was answered")
        .unwrap();
    response.status()
}

/// Another session holds the records table (`LOCK TABLES .. WRITE`): the claim waits on it, and
/// the engine answers 503 at its store timeout rather than run the handler without a record.
/// Once the lock is released, the same key runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_records_table_answers_503_and_recovers() {
    let database = mysql_database().await;
    let store = MySqlStore::connect(&mysql_url_of(&database)).await.unwrap();
    let idem = Idempotency::builder()
        .store(store.clone())
        .store_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = ran.clone();
    let router = Router::new()
        .route(
            "/charges",
            post(move || {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    StatusCode::CREATED
                }
            }),
        )
        .layer(IdempotencyLayer::new(&idem));

    let mut locker = sqlx::MySqlConnection::connect(&mysql_url_of(&database))
        .await
        .unwrap();
    locker
        .execute("LOCK TABLES idempotency_records WRITE")
        .await
        .unwrap();
    assert_eq!(
        post_with_key(&router, "k1").await,
        StatusCode::SERVICE_UNAVAILABLE,
        "fail closed while the table is locked"
    );
    assert_eq!(
        ran.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the handler never ran"
    );
    locker.execute("UNLOCK TABLES").await.unwrap();
    drop(locker);

    // The claim the engine gave up on may still land once the lock is gone: the engine then
    // releases it by its own token in the background. Until then the key answers 503 or 409
    // (in flight); it is never run twice.
    let mut status = StatusCode::SERVICE_UNAVAILABLE;
    for _ in 0..40 {
        status = post_with_key(&router, "k1").await;
        if ![StatusCode::SERVICE_UNAVAILABLE, StatusCode::CONFLICT].contains(&status) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the key runs once the lock is gone"
    );
    assert_eq!(
        post_with_key(&router, "k1").await,
        StatusCode::CREATED,
        "replayed"
    );
    assert_eq!(ran.load(std::sync::atomic::Ordering::SeqCst), 1);
    store.pool().close().await;
    drop_database(&database).await;
}

/// An engine on a fresh MySQL store, over a layer whose `tenant` scope is `scope`, whose handler
/// answers `size` bytes; its database, and how many times the handler ran.
async fn sized(
    size: usize,
    scope: String,
    configure: impl FnOnce(idem_runtime::Builder) -> idem_runtime::Builder,
) -> (Router, Idempotency, String, Arc<AtomicUsize>) {
    let database = mysql_database().await;
    let store = MySqlStore::connect(&mysql_url_of(&database)).await.unwrap();
    let idem = configure(Idempotency::builder().store(store))
        .scope("tenant", move |_| Some(scope.clone()))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let handler = move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            (StatusCode::CREATED, vec![b'x'; size])
        }
    };
    let router = Router::new()
        .route("/charges", post(handler))
        .layer(IdempotencyLayer::new(&idem).scope("tenant"));
    (router, idem, database, ran)
}

async fn send(router: &Router, key: &str) -> (StatusCode, axum::body::Bytes, bool) {
    let request = Request::post("/charges")
        .header("idempotency-key", key)
        .body(Body::from("{}"))
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(60), router.clone().oneshot(request))
        .await
        .expect("answered")
        .unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, body, replayed)
}

/// The server refuses a statement over its `max_allowed_packet` (16 MiB here): the store says so
/// to the engine, which keeps answers under it. A 17 MiB response (the engine allowed 32) reaches
/// its caller whole; its retries are told it was not kept, and it never runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_the_servers_packet_is_sent_and_never_run_again() {
    let size = 17 << 20;
    let (router, idem, database, ran) =
        sized(size, "acme".into(), |b| b.max_response_bytes(32 << 20)).await;
    let (status, body, _) = send(&router, "big").await;
    assert_eq!((status, body.len()), (StatusCode::CREATED, size));
    for _ in 0..2 {
        let (status, body, replayed) = send(&router, "big").await;
        assert_eq!(status, StatusCode::CONFLICT);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "idempotency_response_too_large", "{body}");
        assert!(replayed);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 1, "never run again");
    drop((router, idem));
    drop_database(&database).await;
}

/// A scope value longer than a `BLOB` holds (64 KiB) is kept whole, as PostgreSQL keeps it:
/// the request runs once, its retry replays, and operators read the value back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_value_over_64_kib_is_kept_whole() {
    let tenant = "t".repeat(100_000);
    let (router, idem, database, ran) = sized(10, tenant.clone(), |b| b).await;
    let (status, _, replayed) = send(&router, "long").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    let (status, _, replayed) = send(&router, "long").await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    let filter = RecordFilter::new().scope_value(tenant.clone());
    let listed = idem.records().list(&filter, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].scope_value, tenant, "read back whole");
    drop((router, idem));
    drop_database(&database).await;
}
