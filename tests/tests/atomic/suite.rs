// The atomic-mode suite, included by `atomic_sqlite.rs`, `atomic_postgres.rs` and
// `atomic_mysql.rs`: one test binary per database, because an engine refuses to build while an
// endpoint in its binary takes a `Tx` for another database than its store's. The few statements
// of its own it sends differ by database: `stores::Dialect` and `stores::Doom` hold them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use idem_tests::Gate;
use serde_json::Value;
use tower::ServiceExt;

/// What the handler does wrong after its write, once.
#[derive(Clone, Default)]
struct Faults(Arc<AtomicU8>);

const NONE: u8 = 0;
const PANIC: u8 = 1;
const SERVER_ERROR: u8 = 2;
/// Leaves the transaction unable to commit: on PostgreSQL and SQLite a row violating a deferred
/// foreign key, whose failure surfaces at COMMIT; MySQL checks every constraint at once, so there
/// the server ends the handler's session after its write (see `stores::Doom`).
const COMMIT_FAILS: u8 = 3;

impl Faults {
    fn set(&self, fault: u8) {
        self.0.store(fault, Ordering::SeqCst);
    }
    fn take(&self) -> u8 {
        self.0.swap(NONE, Ordering::SeqCst)
    }
}

#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

struct Reply {
    status: StatusCode,
    body: Value,
}

async fn send(router: &Router, key: Option<&str>, body: &str) -> Reply {
    let mut request = Request::post("/items").header("content-type", "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Body::from(body.to_owned())).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(30), router.clone().oneshot(request))
        .await
        .expect("request timed out")
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

fn respond(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

/// `$store` names the backend in `stores`, `$dialect` its `stores::Dialect`; `$commits` is the
/// handler's `commits` argument; `$one_commit` whether the claim then rides in the handler's
/// transaction (PostgreSQL with `"one"`).
macro_rules! atomic_suite {
    ($backend:ident, $store:ident, $db:ty, $dialect:ident, $commits:tt, $one_commit:expr) => {
        mod $backend {
            use super::*;
            use axum::Json;
            use axum::extract::{FromRef, State};
            use axum::routing::post;
            use idem_runtime::clock::ManualClock;
            use idem_runtime::{Idempotency, Tx, idempotent};

            const DIALECT: crate::stores::Dialect = crate::stores::Dialect::$dialect;
            const SQLITE: bool = matches!(DIALECT, crate::stores::Dialect::Sqlite);
            const ONE_COMMIT: bool = $one_commit;

            #[derive(Clone, FromRef)]
            struct App {
                idem: Idempotency,
                calls: Calls,
                faults: Faults,
                gate: Gate,
            }

            /// Inserts one item; `{"gate": "before"|"after"}` waits before or after the write.
            #[idempotent(scope = "global", commits = $commits)]
            async fn create_item(
                State(calls): State<Calls>,
                State(faults): State<Faults>,
                State(gate): State<Gate>,
                mut tx: Tx<$db>,
                Json(body): Json<Value>,
            ) -> Response {
                let call = calls.0.fetch_add(1, Ordering::SeqCst) + 1;
                if body["gate"] == "before" {
                    gate.pass().await;
                }
                let name = body["name"].as_str().unwrap_or("item").to_owned();
                let conn = tx.conn().await.expect("begin");
                sqlx::query(DIALECT.insert_item())
                    .bind(&name)
                    .execute(&mut *conn)
                    .await
                    .expect("insert");
                match faults.take() {
                    PANIC => panic!("fault injected after the write"),
                    SERVER_ERROR => {
                        return respond(StatusCode::INTERNAL_SERVER_ERROR, Value::Null);
                    }
                    COMMIT_FAILS => crate::stores::Doom::doom(&mut *conn).await,
                    _ => {}
                }
                if body["gate"] == "after" {
                    gate.pass().await;
                }
                let downstream = tx.downstream_key("processor");
                respond(
                    StatusCode::CREATED,
                    serde_json::json!({ "call": call, "name": name, "downstream": downstream }),
                )
            }

            struct Harness {
                router: Router,
                app: App,
                clock: ManualClock,
                pool: sqlx::Pool<$db>,
                cleanup: crate::stores::Cleanup,
            }

            impl Harness {
                async fn rows(&self) -> i64 {
                    sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM items")
                        .fetch_one(&self.pool)
                        .await
                        .unwrap()
                }

                async fn finish(self) {
                    (self.cleanup)().await;
                }
            }

            async fn harness() -> Harness {
                let clock = ManualClock::new();
                let (store, pool, cleanup) = crate::stores::$store().await;
                for ddl in DIALECT.ddl() {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(ddl.to_owned())).execute(&pool).await.unwrap();
                }
                let idem = Idempotency::builder()
                    .store(store)
                    .lease(Duration::from_secs(30))
                    .clock(clock.clone())
                    .build()
                    .unwrap();
                let app = App {
                    idem,
                    calls: Calls::default(),
                    faults: Faults::default(),
                    gate: Gate::default(),
                };
                let router =
                    Router::new().route("/items", post(create_item)).with_state(app.clone());
                Harness { router, app, clock, pool, cleanup }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn writes_and_the_response_commit_together() {
                let h = harness().await;
                let first = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(first.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 1);
                let replay = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(replay.status, StatusCode::CREATED);
                assert_eq!(replay.body, first.body);
                assert_eq!(h.rows().await, 1, "a replay writes nothing");
                assert_eq!(h.app.calls.0.load(Ordering::SeqCst), 1);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_panic_after_the_write_leaves_neither_write_nor_record() {
                let h = harness().await;
                h.app.faults.set(PANIC);
                let router = h.router.clone();
                let crashed = tokio::spawn(async move {
                    send(&router, Some("k"), r#"{"name":"a"}"#).await
                })
                .await;
                assert!(crashed.is_err_and(|e| e.is_panic()));
                assert_eq!(h.rows().await, 0, "the write rolled back");
                let retry = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(retry.status, StatusCode::CREATED, "the record was released");
                assert_eq!(h.rows().await, 1, "the retry executed once");
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_server_error_after_the_write_rolls_it_back() {
                let h = harness().await;
                h.app.faults.set(SERVER_ERROR);
                let failed = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
                assert_eq!(h.rows().await, 0);
                let retry = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(retry.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 1);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_failed_commit_leaves_neither_write_nor_record() {
                let h = harness().await;
                h.app.faults.set(COMMIT_FAILS);
                let failed = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(failed.status, StatusCode::SERVICE_UNAVAILABLE, "{:?}", failed.body);
                assert_eq!(failed.body["code"], "idempotency_store_unavailable");
                assert_eq!(h.rows().await, 0, "nothing of the attempt committed");
                let retry = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(retry.status, StatusCode::CREATED, "the key is free again");
                assert_eq!(h.rows().await, 1);
                let replay = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(replay.body, retry.body);
                assert_eq!(h.rows().await, 1);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_lapsed_owner_never_commits_beside_the_one_that_took_over() {
                let h = harness().await;
                let body = r#"{"name":"a","gate":"after"}"#;
                let router = h.router.clone();
                let stale = tokio::spawn(async move { send(&router, Some("k"), body).await });
                h.app.gate.entered().await; // wrote, not committed, looks crashed
                h.clock.advance(Duration::from_secs(31));
                let router = h.router.clone();
                let taker = tokio::spawn(async move { send(&router, Some("k"), body).await });
                if ONE_COMMIT {
                    // The claim is the owner's open transaction, which no clock ends: the taker
                    // meets it and is refused.
                    let taker = taker.await.unwrap();
                    assert_eq!(taker.status, StatusCode::CONFLICT, "{:?}", taker.body);
                    h.app.gate.open();
                    let stale = stale.await.unwrap();
                    assert_eq!(stale.status, StatusCode::CREATED);
                    let replay = send(&h.router, Some("k"), body).await;
                    assert_eq!(replay.body, stale.body);
                    assert_eq!(h.rows().await, 1, "exactly one write committed");
                    return h.finish().await;
                }
                if SQLITE {
                    // SQLite has one writer: the stale owner's open transaction holds it, so the
                    // taker's claim waits; the owner commits first and the taker replays.
                    h.app.gate.open();
                } else {
                    h.app.gate.entered().await; // the taker took over and wrote too
                    h.app.gate.open();
                    h.app.gate.open();
                }
                let (stale, taker) = (stale.await.unwrap(), taker.await.unwrap());
                assert_eq!(h.rows().await, 1, "exactly one write committed");
                let replay = send(&h.router, Some("k"), body).await;
                assert_eq!(replay.status, StatusCode::CREATED);
                if SQLITE {
                    assert_eq!(stale.status, StatusCode::CREATED);
                    assert_eq!(taker.body, stale.body);
                    assert_eq!(replay.body, stale.body);
                } else {
                    assert_eq!(stale.status, StatusCode::CONFLICT, "the displaced owner rolled back");
                    assert_eq!(stale.body["code"], "idempotency_key_in_progress");
                    assert_eq!(taker.status, StatusCode::CREATED);
                    assert_eq!(replay.body, taker.body);
                    assert_eq!(replay.body["call"], 2);
                }
                h.finish().await;
            }

            /// `forget --force` on a running owner in atomic mode: the owner's transaction rolls
            /// back and its client gets 409, not the handler's answer; a retry runs again.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_forced_forget_rolls_the_running_owner_back() {
                use idem_runtime::store::records::{Forgotten, RecordFilter};
                let h = harness().await;
                let body = r#"{"name":"a","gate":"after"}"#;
                let router = h.router.clone();
                let owner = tokio::spawn(async move { send(&router, Some("k"), body).await });
                h.app.gate.entered().await; // wrote in its transaction, not committed
                let records = h.app.idem.records();
                let listed = records.list(&RecordFilter::new(), 10).await.unwrap();
                if ONE_COMMIT {
                    // The claim rides in the owner's open transaction: an operator sees no record
                    // to forget, and the owner commits as usual.
                    assert!(listed.is_empty(), "{listed:?}");
                    h.app.gate.open();
                    assert_eq!(owner.await.unwrap().status, StatusCode::CREATED);
                    assert_eq!(h.rows().await, 1);
                    return h.finish().await;
                }
                let [running] = listed.as_slice() else {
                    panic!("one record in flight: {listed:?}");
                };
                let forced = records.force_forget(&running.key).await;
                if SQLITE {
                    // One writer: the owner's open transaction holds it, so the forced delete
                    // waits for it and fails closed at the store timeout; nothing is deleted.
                    assert!(forced.is_err(), "{forced:?}");
                    h.app.gate.open();
                    assert_eq!(owner.await.unwrap().status, StatusCode::CREATED);
                    assert_eq!(h.rows().await, 1);
                    return h.finish().await;
                }
                assert!(matches!(forced, Ok(Forgotten::Deleted(_))), "{forced:?}");
                h.app.gate.open();
                let owner = owner.await.unwrap();
                assert_eq!(owner.status, StatusCode::CONFLICT, "{:?}", owner.body);
                assert_eq!(owner.body["code"], "idempotency_key_in_progress");
                assert_eq!(h.rows().await, 0, "the owner's write rolled back");
                let retry = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(retry.status, StatusCode::CREATED, "{:?}", retry.body);
                assert_eq!(retry.body["call"], 2, "the retry ran the handler again");
                assert_eq!(h.rows().await, 1);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn concurrent_duplicates_write_one_row() {
                let h = harness().await;
                let mut tasks = Vec::new();
                for _ in 0..24 {
                    let router = h.router.clone();
                    tasks.push(tokio::spawn(async move {
                        send(&router, Some("same"), r#"{"name":"a"}"#).await
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
                        other => panic!("unexpected {other}: {:?}", reply.body),
                    }
                }
                assert!(!created.is_empty());
                assert!(created.iter().all(|b| *b == created[0]), "every 201 is the same answer");
                assert_eq!(h.rows().await, 1, "one business row");
                assert_eq!(h.app.calls.0.load(Ordering::SeqCst), 1);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn other_keys_do_not_wait_for_a_running_request() {
                let h = harness().await;
                // On SQLite the running request holds no lock until its first query; on
                // PostgreSQL not even its uncommitted write blocks other keys.
                let gate = if SQLITE { "before" } else { "after" };
                let body = format!(r#"{{"name":"slow","gate":"{gate}"}}"#);
                let router = h.router.clone();
                let slow = tokio::spawn(async move { send(&router, Some("slow"), &body).await });
                h.app.gate.entered().await;
                for i in 0..3 {
                    let key = format!("fast-{i}");
                    let fast = send(&h.router, Some(&key), r#"{"name":"fast"}"#).await;
                    assert_eq!(fast.status, StatusCode::CREATED);
                }
                assert_eq!(h.rows().await, 3, "the fast requests committed while the slow one ran");
                h.app.gate.open();
                assert_eq!(slow.await.unwrap().status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 4);
                h.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn downstream_keys_are_stable_across_retries() {
                let h = harness().await;
                h.app.faults.set(SERVER_ERROR);
                let failed = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
                let retry = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                let other = send(&h.router, Some("k2"), r#"{"name":"a"}"#).await;
                let again = send(&h.router, Some("k"), r#"{"name":"a"}"#).await;
                let key = retry.body["downstream"].as_str().unwrap().to_owned();
                assert_eq!(key.len(), 36);
                assert_eq!(again.body["downstream"], key.as_str());
                assert_ne!(other.body["downstream"], key.as_str());
                // Without an idempotency key the handler still runs in a committed transaction.
                let plain = send(&h.router, None, r#"{"name":"b"}"#).await;
                assert_eq!(plain.status, StatusCode::CREATED);
                assert_eq!(h.rows().await, 3);
                h.finish().await;
            }
        }
    };
}

/// Fresh stores and their business tables, per backend.
mod stores {
    use std::future::Future;
    use std::pin::Pin;

    use idem_runtime::store::{MySqlStore, PostgresStore, SqliteStore};

    pub(crate) type Cleanup = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

    /// The suite's own statements, per database.
    #[allow(dead_code)]
    #[derive(Clone, Copy)]
    pub(crate) enum Dialect {
        Sqlite,
        Postgres,
        MySql,
    }

    impl Dialect {
        /// The business tables: `items`, and on the databases with deferred constraints the
        /// `parents` and `children` that `Doom` breaks.
        pub(crate) const fn ddl(self) -> &'static [&'static str] {
            match self {
                Self::Sqlite => &[
                    "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
                    "CREATE TABLE parents (id INTEGER PRIMARY KEY)",
                    "CREATE TABLE children (parent_id INTEGER NOT NULL \
                     REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)",
                ],
                Self::Postgres => &[
                    "CREATE TABLE items (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL)",
                    "CREATE TABLE parents (id BIGINT PRIMARY KEY)",
                    "CREATE TABLE children (parent_id BIGINT NOT NULL \
                     REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)",
                ],
                Self::MySql => &[
                    "CREATE TABLE items (id BIGINT AUTO_INCREMENT PRIMARY KEY, name TEXT NOT NULL)",
                ],
            }
        }

        /// Inserts one item, its name bound as the only parameter.
        pub(crate) const fn insert_item(self) -> &'static str {
            match self {
                Self::Sqlite | Self::Postgres => "INSERT INTO items (name) VALUES ($1)",
                Self::MySql => "INSERT INTO items (name) VALUES (?)",
            }
        }
    }

    /// Leaves the handler's transaction unable to commit, after its write.
    pub(crate) trait Doom {
        fn doom(&mut self) -> impl Future<Output = ()> + Send;
    }

    /// A row violating a deferred foreign key, accepted until COMMIT.
    const ORPHAN: &str = "INSERT INTO children (parent_id) VALUES (424242)";

    impl Doom for sqlx::PgConnection {
        async fn doom(&mut self) {
            sqlx::query(ORPHAN)
                .execute(self)
                .await
                .expect("deferred until COMMIT");
        }
    }

    impl Doom for sqlx::SqliteConnection {
        async fn doom(&mut self) {
            sqlx::query(ORPHAN)
                .execute(self)
                .await
                .expect("deferred until COMMIT");
        }
    }

    /// MySQL checks every constraint at once: the server ends the session instead (its
    /// transaction rolls back), as a connection lost before COMMIT would.
    impl Doom for sqlx::MySqlConnection {
        async fn doom(&mut self) {
            let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                .fetch_one(&mut *self)
                .await
                .expect("the session's id");
            let killed = sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
                .execute(self)
                .await;
            assert!(killed.is_err(), "a session killed is told so");
        }
    }

    #[allow(dead_code)]
    pub(crate) async fn sqlite() -> (SqliteStore, sqlx::SqlitePool, Cleanup) {
        let store = idem_tests::sqlite_store().await;
        let pool = store.pool().clone();
        let doomed = store.clone();
        let cleanup: Cleanup = Box::new(move || {
            Box::pin(async move { idem_tests::db::remove_sqlite_store(&doomed).await })
        });
        (store, pool, cleanup)
    }

    #[allow(dead_code)]
    pub(crate) async fn postgres() -> (PostgresStore, sqlx::PgPool, Cleanup) {
        // A database of its own: the business tables live in its `public` schema, beside the
        // store's `idem` schema, as an application's would.
        let db = idem_tests::db::TestDatabase::create().await;
        let pool = db.pool().await;
        let store = PostgresStore::from_pool(pool.clone()).await.unwrap();
        let cleanup: Cleanup = Box::new(move || {
            Box::pin(async move {
                pool.close().await;
                db.drop().await;
            })
        });
        let pool = store.pool().clone();
        (store, pool, cleanup)
    }

    #[allow(dead_code)]
    pub(crate) async fn mysql() -> (MySqlStore, sqlx::MySqlPool, Cleanup) {
        // A database of its own, holding the business table beside the store's, as an
        // application's would.
        let store = idem_tests::mysql::mysql_store().await;
        let pool = store.pool().clone();
        let doomed = store.clone();
        let cleanup: Cleanup = Box::new(move || {
            Box::pin(async move { idem_tests::mysql::drop_mysql_store(&doomed).await })
        });
        (store, pool, cleanup)
    }
}
