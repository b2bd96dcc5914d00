//! `IdempotencyLayer` beyond the rules the engine suite runs through both faces: how it meets
//! `#[idempotent]` handlers, and atomic mode under it on SQLite and PostgreSQL, counted in a
//! real business table.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, IdempotencyLayer, idempotent};
use serde_json::Value;
use tower::ServiceExt;

#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

impl Calls {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

struct Reply {
    status: StatusCode,
    replayed: bool,
    body: Value,
}

async fn send(router: &Router, method: Method, uri: &str, key: Option<&str>, body: &str) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .header("x-org", "acme");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), router.clone().oneshot(request))
        .await
        .expect("request timed out")
        .unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        replayed,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

/// Required key, global scope, 1 h: all different from the layer below.
#[idempotent(scope = "global", key = "required", ttl = "1h")]
async fn annotated(State(calls): State<Calls>) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("\"call {}\"", calls.bump()))
}

fn org_of(caller: &idem_runtime::Caller<'_>) -> Option<String> {
    let org = caller.metadata("x-org")?;
    Some(org.to_owned())
}

#[derive(Clone, axum::extract::FromRef)]
struct Covered {
    idem: Idempotency,
    calls: Calls,
}

fn covered_app(clock: &ManualClock) -> (Router, Covered) {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("org", org_of)
        .clock(clock.clone())
        .build()
        .unwrap();
    let app = Covered {
        idem: idem.clone(),
        calls: Calls::default(),
    };
    let router = Router::new()
        .route("/covered", post(annotated).delete(annotated))
        .route("/skipped", post(annotated))
        .layer(
            IdempotencyLayer::new(&idem)
                .scope("org")
                .ttl(Duration::from_secs(60))
                .skip("/skipped"),
        )
        .with_state(app.clone());
    (router, app)
}

#[tokio::test]
async fn an_idempotent_handler_under_the_layer_claims_one_record_on_the_layers_terms() {
    let clock = ManualClock::new();
    let (router, app) = covered_app(&clock);
    // The layer's optional key, not the attribute's required one.
    let keyless = send(&router, Method::POST, "/covered", None, "{}").await;
    assert_eq!(keyless.status, StatusCode::CREATED);
    let first = send(&router, Method::POST, "/covered", Some("k"), "{}").await;
    let retry = send(&router, Method::POST, "/covered", Some("k"), "{}").await;
    assert!(!first.replayed && retry.replayed);
    assert_eq!(retry.body, first.body);
    assert_eq!(app.calls.get(), 2);
    // The layer's 60 s ttl, not the attribute's hour; and one record, not one per face.
    clock.advance(Duration::from_secs(61));
    assert_eq!(app.idem.purge_expired(100).await.unwrap(), 1);
    let after = send(&router, Method::POST, "/covered", Some("k"), "{}").await;
    assert!(
        !after.replayed,
        "no record of the attribute's replays it either"
    );
    assert_eq!(app.calls.get(), 3);
    clock.advance(Duration::from_secs(2 * 60 * 60));
    assert_eq!(
        app.idem.purge_expired(100).await.unwrap(),
        1,
        "the second request's layer record, and no attribute record of the first"
    );
}

#[tokio::test]
async fn an_idempotent_handler_the_layer_does_not_cover_works_on_its_own() {
    let clock = ManualClock::new();
    let (router, app) = covered_app(&clock);
    let routes = [
        (Method::POST, "/skipped", "k1"),
        (Method::DELETE, "/covered", "k2"),
    ];
    for (method, uri, key) in routes.clone() {
        let missing = send(&router, method.clone(), uri, None, "").await;
        assert_eq!(missing.status, StatusCode::BAD_REQUEST, "{method} {uri}");
        assert_eq!(missing.body["code"], "idempotency_key_missing");
        send(&router, method.clone(), uri, Some(key), "").await;
        let retry = send(&router, method.clone(), uri, Some(key), "").await;
        assert!(retry.replayed, "{method} {uri}: the attribute's record");
    }
    assert_eq!(app.calls.get(), 2);
    // The attribute's hour holds after the layer's minute would have lapsed.
    clock.advance(Duration::from_secs(61));
    for (method, uri, key) in routes {
        assert!(send(&router, method, uri, Some(key), "").await.replayed);
    }
}

/// Atomic mode under the layer: plain handlers taking `Tx<$db>`.
macro_rules! atomic_cases {
    ($backend:ident, $db:ty) => {
        mod $backend {
            use super::*;
            use axum::Json;
            use axum::extract::FromRef;
            use idem_runtime::Tx;

            #[derive(Clone, FromRef)]
            struct App {
                calls: Calls,
                table: Arc<str>,
            }

            /// Inserts one item; `{"status": N}` answers N after the write.
            async fn create_item(
                State(calls): State<Calls>,
                State(table): State<Arc<str>>,
                mut tx: Tx<$db>,
                Json(body): Json<Value>,
            ) -> (StatusCode, Json<Value>) {
                let call = calls.bump();
                let insert = format!("INSERT INTO {table} (name) VALUES ($1)");
                sqlx::query(sqlx::AssertSqlSafe(insert))
                    .bind(body["name"].as_str().unwrap_or("item"))
                    .execute(tx.conn().await.expect("begin"))
                    .await
                    .expect("insert");
                let status = body["status"].as_u64().unwrap_or(201) as u16;
                let body = serde_json::json!({ "call": call });
                (StatusCode::from_u16(status).unwrap(), Json(body))
            }

            struct Harness {
                router: Router,
                calls: Calls,
                pool: sqlx::Pool<$db>,
                table: Arc<str>,
                store: stores::$backend::Store,
            }

            impl Harness {
                async fn rows(&self) -> i64 {
                    let count = format!("SELECT COUNT(*) FROM {}", self.table);
                    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(count))
                        .fetch_one(&self.pool)
                        .await
                        .unwrap()
                }

                async fn send(&self, key: Option<&str>, body: &str) -> Reply {
                    send(&self.router, Method::POST, "/items", key, body).await
                }
            }

            async fn harness() -> Harness {
                let (store, table) = stores::$backend::create().await;
                let pool = store.pool().clone();
                let idem = Idempotency::builder().store(store.clone()).build().unwrap();
                let calls = Calls::default();
                let app = App {
                    calls: calls.clone(),
                    table: table.clone(),
                };
                let router = Router::new()
                    .route("/items", post(create_item))
                    .layer(IdempotencyLayer::new(&idem))
                    .with_state(app);
                Harness {
                    router,
                    calls,
                    pool,
                    table,
                    store,
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn writes_and_the_response_commit_together() {
                let h = harness().await;
                let first = h.send(Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(first.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 1);
                let replay = h.send(Some("k"), r#"{"name":"a"}"#).await;
                assert!(replay.replayed);
                assert_eq!(replay.body, first.body);
                assert_eq!(h.rows().await, 1, "a replay writes nothing");
                // A business 409 after the write is the handler's answer: committed and stored.
                let conflict = h.send(Some("c"), r#"{"status":409}"#).await;
                assert_eq!(conflict.status, StatusCode::CONFLICT);
                assert!(h.send(Some("c"), r#"{"status":409}"#).await.replayed);
                assert_eq!(h.rows().await, 2);
                stores::$backend::discard(&h.store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_rejection_or_a_server_error_rolls_the_write_back() {
                let h = harness().await;
                for status in [422, 500] {
                    let body = format!(r#"{{"name":"a","status":{status}}}"#);
                    let failed = h.send(Some("k"), &body).await;
                    assert_eq!(failed.status.as_u16(), status);
                    assert_eq!(h.rows().await, 0, "{status}: rolled back");
                }
                // The key is free: the corrected request runs and commits once.
                let fixed = h.send(Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(fixed.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 1);
                assert_eq!(h.calls.get(), 3);
                stores::$backend::discard(&h.store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_duplicates_write_one_row() {
                let h = Arc::new(harness().await);
                let mut tasks = Vec::new();
                for _ in 0..16 {
                    let h = h.clone();
                    tasks.push(tokio::spawn(async move {
                        h.send(Some("same"), r#"{"name":"a"}"#).await
                    }));
                }
                let mut created = Vec::new();
                for task in tasks {
                    let reply = task.await.unwrap();
                    match reply.status {
                        StatusCode::CREATED => created.push(reply.body),
                        StatusCode::CONFLICT => {
                            assert_eq!(reply.body["code"], "idempotency_key_in_progress")
                        }
                        other => panic!("unexpected {other}: {}", reply.body),
                    }
                }
                assert!(created.iter().all(|b| *b == created[0]));
                assert_eq!(h.rows().await, 1, "one business row");
                assert_eq!(h.calls.get(), 1);
                stores::$backend::discard(&h.store).await;
            }

            #[tokio::test]
            async fn without_a_key_the_handler_still_commits() {
                let h = harness().await;
                assert_eq!(h.send(None, "{}").await.status, StatusCode::CREATED);
                assert_eq!(h.send(None, "{}").await.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 2);
                stores::$backend::discard(&h.store).await;
            }
        }
    };
}

atomic_cases!(sqlite, sqlx::Sqlite);
atomic_cases!(postgres, sqlx::Postgres);

/// Sends twice to `route` under a layer on a SQLite store: each answer is 500
/// `idempotency_misconfigured`, never replayed (the key is released), and its detail says
/// `why`.
async fn misconfigured(route: axum::routing::MethodRouter, why: &str) {
    let (store, _) = stores::sqlite::create().await;
    let idem = Idempotency::builder().store(store.clone()).build().unwrap();
    let router = Router::new()
        .route("/items", route)
        .layer(IdempotencyLayer::new(&idem));
    for _ in 0..2 {
        let reply = send(&router, Method::POST, "/items", Some("k"), "{}").await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reply.body["code"], "idempotency_misconfigured");
        let detail = reply.body["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{detail}");
        assert!(!reply.replayed);
    }
    stores::sqlite::discard(&store).await;
}

/// A handler taking a transaction the store does not lend.
#[tokio::test]
async fn a_tx_for_another_database_is_500_misconfigured() {
    async fn wrong(_tx: idem_runtime::Tx<sqlx::Postgres>) -> StatusCode {
        StatusCode::CREATED
    }
    misconfigured(
        post(wrong),
        "offers no transactions on this handler's database",
    )
    .await;
}

/// A handler taking two transactions.
#[tokio::test]
async fn a_second_tx_is_500_misconfigured() {
    async fn twice(
        _one: idem_runtime::Tx<sqlx::Sqlite>,
        _two: idem_runtime::Tx<sqlx::Sqlite>,
    ) -> StatusCode {
        StatusCode::CREATED
    }
    misconfigured(post(twice), "a handler takes at most one `Tx`").await;
}

/// A `Tx`'s `Debug` names its database and says whether it has begun.
#[tokio::test]
async fn a_tx_shows_its_database_and_whether_it_began() {
    async fn show(mut tx: idem_runtime::Tx<sqlx::Sqlite>) -> axum::Json<Value> {
        let before = format!("{tx:?}");
        tx.conn().await.unwrap();
        axum::Json(serde_json::json!({ "before": before, "after": format!("{tx:?}") }))
    }
    let (store, _) = stores::sqlite::create().await;
    let idem = Idempotency::builder().store(store.clone()).build().unwrap();
    let router = Router::new()
        .route("/items", post(show))
        .layer(IdempotencyLayer::new(&idem));
    let reply = send(&router, Method::POST, "/items", Some("k"), "{}").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body["before"],
        r#"Tx { database: "SQLite", begun: false, .. }"#
    );
    assert_eq!(
        reply.body["after"],
        r#"Tx { database: "SQLite", begun: true, .. }"#
    );
    stores::sqlite::discard(&store).await;
}

/// Fresh stores with an `items` table in the store's own database, per backend.
mod stores {
    pub(crate) mod sqlite {
        use std::sync::Arc;

        pub(crate) type Store = idem_runtime::store::SqliteStore;

        pub(crate) async fn create() -> (Store, Arc<str>) {
            let store = idem_tests::sqlite_store().await;
            sqlx::query("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
                .execute(store.pool())
                .await
                .unwrap();
            (store, "items".into())
        }

        pub(crate) async fn discard(store: &Store) {
            idem_tests::db::remove_sqlite_store(store).await;
        }
    }

    pub(crate) mod postgres {
        use std::sync::Arc;

        pub(crate) type Store = idem_runtime::store::PostgresStore;

        /// The table lives in the store's schema of its own, dropped with it.
        pub(crate) async fn create() -> (Store, Arc<str>) {
            let store = idem_tests::postgres_store().await;
            let table = format!("\"{}\".items", store.schema());
            let ddl =
                format!("CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)");
            sqlx::query(sqlx::AssertSqlSafe(ddl))
                .execute(store.pool())
                .await
                .unwrap();
            (store, table.into())
        }

        pub(crate) async fn discard(store: &Store) {
            idem_tests::db::drop_postgres_store(store).await;
        }
    }
}
