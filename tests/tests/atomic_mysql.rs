//! Atomic mode on MySQL/MariaDB (`Tx<sqlx::MySql>`, two commits): the generic suite (writes and
//! the stored response commit together, counted in a real business table; panics, 5xx and a
//! failed commit leave nothing; a displaced or forgotten owner rolls back), and a transaction
//! InnoDB rolls back under the handler (a deadlock it lost, whose error the handler swallowed),
//! which stores nothing and is answered 503, so the retry executes once.
//!
//! ```text
//! cargo nextest run -p idem-tests --test atomic_mysql
//! ```

include!("atomic/suite.rs");

atomic_suite!(mysql, mysql, sqlx::MySql, MySql, "two", false);

/// A transaction InnoDB ends under the handler.
mod deadlock {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
    use std::time::Duration;

    use axum::body::Body;
    use axum::extract::{FromRef, State};
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use axum::{Json, Router};
    use idem_runtime::store::MySqlStore;
    use idem_runtime::{Idempotency, Tx, idempotent};
    use idem_tests::mysql::{drop_database, mysql_database, mysql_url_of};
    use serde_json::Value;
    use sqlx::{Connection, Executor, MySqlPool};
    use tokio::sync::Notify;
    use tower::ServiceExt;

    const PLAIN: u8 = 0;
    /// Locks row 1 of `locks`, says so, then waits for row 2, which the test holds: a deadlock the
    /// handler loses. It swallows the error and answers 201.
    const DEADLOCK: u8 = 1;

    #[derive(Clone, FromRef)]
    struct App {
        idem: Idempotency,
        calls: Arc<AtomicUsize>,
        mode: Arc<AtomicU8>,
        locked: Arc<Notify>,
    }

    #[idempotent(scope = "global", commits = "two")]
    async fn create_item(
        State(calls): State<Arc<AtomicUsize>>,
        State(mode): State<Arc<AtomicU8>>,
        State(locked): State<Arc<Notify>>,
        mut tx: Tx<sqlx::MySql>,
    ) -> (StatusCode, Json<Value>) {
        let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let conn = tx.conn().await.expect("begin");
        sqlx::query("INSERT INTO items (name) VALUES (?)")
            .bind("item")
            .execute(&mut *conn)
            .await
            .expect("insert");
        if mode.swap(PLAIN, Ordering::SeqCst) == DEADLOCK {
            conn.execute("UPDATE locks SET n = n + 1 WHERE id = 1")
                .await
                .expect("row 1");
            locked.notify_one();
            // Swallowed, as a careless handler would: the transaction is already gone.
            let lost = conn
                .execute("UPDATE locks SET n = n + 1 WHERE id = 2")
                .await;
            assert!(
                lost.is_err(),
                "the handler's transaction is the deadlock victim"
            );
        }
        (
            StatusCode::CREATED,
            Json(serde_json::json!({ "call": call })),
        )
    }

    struct Harness {
        router: Router,
        app: App,
        pool: MySqlPool,
        database: String,
    }

    impl Harness {
        async fn new() -> Self {
            let database = mysql_database().await;
            let store = MySqlStore::connect(&mysql_url_of(&database)).await.unwrap();
            let pool = store.pool().clone();
            for ddl in [
                "CREATE TABLE items (id BIGINT AUTO_INCREMENT PRIMARY KEY, name TEXT NOT NULL)",
                "CREATE TABLE locks (id INT PRIMARY KEY, n INT NOT NULL)",
                "INSERT INTO locks VALUES (1, 0), (2, 0)",
                "CREATE TABLE ballast (id INT PRIMARY KEY)",
            ] {
                pool.execute(ddl).await.unwrap();
            }
            let idem = Idempotency::builder().store(store).build().unwrap();
            let app = App {
                idem,
                calls: Arc::default(),
                mode: Arc::default(),
                locked: Arc::default(),
            };
            let router = Router::new()
                .route("/items", post(create_item))
                .with_state(app.clone());
            Self {
                router,
                app,
                pool,
                database,
            }
        }

        async fn send(&self, key: &str) -> StatusCode {
            send(&self.router, key).await
        }

        async fn items(&self) -> i64 {
            sqlx::query_scalar("SELECT COUNT(*) FROM items")
                .fetch_one(&self.pool)
                .await
                .unwrap()
        }

        async fn finish(self) {
            self.pool.close().await;
            drop_database(&self.database).await;
        }
    }

    async fn send(router: &Router, key: &str) -> StatusCode {
        let request = Request::post("/items")
            .header("idempotency-key", key)
            .body(Body::empty())
            .unwrap();
        tokio::time::timeout(Duration::from_secs(60), router.clone().oneshot(request))
            .await
            .expect("answered")
            .unwrap()
            .status()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transaction_rolled_back_by_a_deadlock_stores_nothing_and_answers_503() {
        let h = Harness::new().await;
        h.app.mode.store(DEADLOCK, Ordering::SeqCst);
        // The other transaction: heavier (InnoDB picks the lighter one as the victim), holding row 2.
        let mut other = sqlx::MySqlConnection::connect(&mysql_url_of(&h.database))
            .await
            .unwrap();
        other.execute("BEGIN").await.unwrap();
        other
            .execute(
                "INSERT INTO ballast (id) SELECT seq FROM seq_1_to_200 \
                 /* MariaDB's sequence engine */",
            )
            .await
            .unwrap();
        other
            .execute("UPDATE locks SET n = n + 1 WHERE id = 2")
            .await
            .unwrap();
        let router = h.router.clone();
        let request = tokio::spawn(async move { send(&router, "k").await });
        h.app.locked.notified().await;
        // Waits for row 1, which the handler holds while it waits for row 2: InnoDB breaks the cycle
        // by rolling the handler's transaction back, and this update goes through.
        other
            .execute("UPDATE locks SET n = n + 1 WHERE id = 1")
            .await
            .unwrap();
        other.execute("COMMIT").await.unwrap();
        assert_eq!(
            request.await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE,
            "never the handler's 201 over writes that rolled back"
        );
        assert_eq!(h.items().await, 0, "nothing of the attempt committed");
        assert_eq!(
            h.send("k").await,
            StatusCode::CREATED,
            "the key was released"
        );
        assert_eq!(h.send("k").await, StatusCode::CREATED, "replayed");
        assert_eq!(h.items().await, 1, "executed once");
        assert_eq!(h.app.calls.load(Ordering::SeqCst), 2);
        h.finish().await;
    }
}

/// MySQL has no setting scoped to a transaction: the timeouts a lent transaction's `BEGIN` sets
/// on its session are put back when it ends, so the pool's connections keep the application's
/// own settings whatever the handler answered.
mod session {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};
    use std::time::Duration;

    use axum::Router;
    use axum::body::Body;
    use axum::extract::{FromRef, State};
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use idem_runtime::store::MySqlStore;
    use idem_runtime::{Idempotency, Tx, idempotent};
    use idem_tests::mysql::{drop_database, mysql_database, mysql_url_of};
    use sqlx::mysql::MySqlPoolOptions;
    use sqlx::{Executor, MySqlPool};
    use tower::ServiceExt;

    /// The application's own session settings: lock waits 37 s and 41 s, statements 23 s.
    const APP_SETTINGS: &str = "SET SESSION innodb_lock_wait_timeout = 37, lock_wait_timeout = 41, \
         max_statement_time = 23";
    /// What the settings read back as, from [`SETTINGS`], on the application's sessions.
    const APP: Settings = (37, 41, 23_000, 1);
    /// The session's lock waits, statement time (ms), and whether the store's saved copy is gone.
    const SETTINGS: &str = "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS SIGNED), \
         CAST(@@SESSION.lock_wait_timeout AS SIGNED), \
         CAST(@@SESSION.max_statement_time * 1000 AS SIGNED), \
         CAST(@idem_lock_wait IS NULL AS SIGNED)";
    type Settings = (i64, i64, i64, i64);

    #[derive(Clone, FromRef)]
    struct App {
        idem: Idempotency,
        /// The status the handler answers next.
        answer: Arc<AtomicU16>,
        /// What the handler read of its session inside the transaction.
        inside: Arc<std::sync::Mutex<Option<Settings>>>,
    }

    #[idempotent(scope = "global", commits = "two")]
    async fn create_item(
        State(answer): State<Arc<AtomicU16>>,
        State(inside): State<Arc<std::sync::Mutex<Option<Settings>>>>,
        mut tx: Tx<sqlx::MySql>,
    ) -> StatusCode {
        let conn = tx.conn().await.expect("begin");
        conn.execute("INSERT INTO items (name) VALUES ('item')")
            .await
            .expect("insert");
        let read: Settings = sqlx::query_as(SETTINGS)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        *inside.lock().unwrap() = Some(read);
        let answer = answer.load(Ordering::SeqCst);
        if answer == STOPPED {
            // Past the transaction's deadline: the engine stops it.
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        StatusCode::from_u16(answer).unwrap()
    }

    /// The handler outlives its transaction's deadline, and the request is answered 503.
    const STOPPED: u16 = 503;

    /// Every connection of `pool` (at most two), held at once so none is read twice.
    async fn every_session(pool: &MySqlPool) -> Vec<Settings> {
        let read = async {
            let (mut a, mut b) = tokio::try_join!(pool.acquire(), pool.acquire()).unwrap();
            let a: Settings = sqlx::query_as(SETTINGS).fetch_one(&mut *a).await.unwrap();
            let b: Settings = sqlx::query_as(SETTINGS).fetch_one(&mut *b).await.unwrap();
            vec![a, b]
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("both connections came back to the pool")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_pooled_connection_keeps_the_pools_settings_after_a_lent_transaction() {
        let database = mysql_database().await;
        let pool = MySqlPoolOptions::new()
            .max_connections(2)
            .after_connect(|conn, _| {
                Box::pin(async move { conn.execute(APP_SETTINGS).await.map(drop) })
            })
            .connect(&mysql_url_of(&database))
            .await
            .unwrap();
        pool.execute(
            "CREATE TABLE items (id BIGINT AUTO_INCREMENT PRIMARY KEY, name TEXT NOT NULL)",
        )
        .await
        .unwrap();
        let store = MySqlStore::from_pool(pool.clone()).await.unwrap();
        let idem = Idempotency::builder()
            .store(store)
            .transaction_timeout(Duration::from_millis(2500))
            .build()
            .unwrap();
        let app = App {
            idem,
            answer: Arc::default(),
            inside: Arc::default(),
        };
        let router = Router::new()
            .route("/items", post(create_item))
            .with_state(app.clone());
        // Committed with its record (201, and a stored 4xx), rolled back (5xx), stopped at its
        // deadline (503).
        for (n, status) in [201, 409, 500, STOPPED, 201].into_iter().enumerate() {
            app.answer.store(status, Ordering::SeqCst);
            let request = Request::post("/items")
                .header("idempotency-key", format!("k{n}"))
                .body(Body::empty())
                .unwrap();
            let response =
                tokio::time::timeout(Duration::from_secs(30), router.clone().oneshot(request))
                    .await
                    .expect("answered")
                    .unwrap();
            assert_eq!(response.status().as_u16(), status, "request {n}");
            let inside = app.inside.lock().unwrap().take();
            assert_eq!(
                inside,
                Some((4, 4, 3500, 0)),
                "request {n}: the lent transaction's lock waits and statements are bounded by its \
                 statement timeout (the transaction's and a second; lock waits in whole seconds)"
            );
            for settings in every_session(&pool).await {
                assert_eq!(
                    settings, APP,
                    "request {n} ({status}): the pool's own settings"
                );
            }
        }
        let items: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM items")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(
            items, 3,
            "the 201s and the 409 committed, the 500 and the stopped one rolled back"
        );
        pool.close().await;
        drop_database(&database).await;
    }
}

/// Why MySQL commits twice: what InnoDB does to a claim inside the handler's transaction.
#[path = "atomic_mysql/one_commit.rs"]
mod one_commit;

/// Round trips per fresh request, counted by a proxy.
#[path = "atomic_mysql/round_trips.rs"]
mod round_trips;
