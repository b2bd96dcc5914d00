//! Input that can never succeed is never answered as retryable. A value PostgreSQL refuses (a
//! NUL in text, a number out of its column's range), written in atomic mode, aborts the
//! operation's transaction; the operation answers "invalid", and that answer reaches the caller
//! (HTTP `400` through the attribute, with one commit and with two, and through the layer; the
//! programmatic API's own error), never the engine's "store unavailable, retry". Nothing of it
//! is stored: no row, no record, so a retry runs again and the key stays free for a good
//! request. The layer is also run on SQLite, whose table declares the same limits, and with a
//! body that is not UTF-8. The gRPC face's case is `grpc/atomic.rs`'s. A scope value PostgreSQL
//! cannot keep is refused before the claim, as no caller (`401`), on every face and on MySQL too.
//!
//! MySQL (MariaDB here) keeps a NUL in text, and fails only the statement, not the transaction,
//! on a number out of range: the first answer is PostgreSQL's (`400 invalid_value`), and the
//! layer's default releases it as there; the attribute stores that 400 with the transaction's
//! other writes, so its retry replays it (`mysql_...`).
//!
//! ```text
//! cargo test -p idem-tests --test bad_values
//! ```

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::store::records::RecordFilter;
use idem_runtime::store::{MySqlStore, PostgresStore, SqliteStore};
use idem_runtime::{Idempotency, IdempotencyLayer, OperationError, Outcome, Tx, idempotent};
use idem_tests::{Calls, TestStore};
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Postgres};
use tower::ServiceExt;

/// What PostgreSQL refuses to store, as request bodies.
fn bad_bodies() -> [Value; 2] {
    [json!({ "name": "a\u{0}b", "quantity": 1 }), out_of_range()]
}

/// A quantity out of a 32-bit integer's range: refused by every database here.
fn out_of_range() -> Value {
    json!({ "name": "a", "quantity": 1_i64 << 40 })
}

/// The application's table, in the store's schema.
#[derive(Clone)]
struct Items(Arc<str>);

#[derive(Clone, FromRef)]
struct App {
    idem: Idempotency,
    items: Items,
    runs: Calls,
}

/// The items of the application on the database `$db`, beside the records of a fresh `$store`:
/// `harness` makes both (the table named by `$table`, made by `$ddl`, and an engine on the
/// store); `insert` writes `body` as
/// an item in the operation's transaction (`name` is text, `quantity` a 32-bit integer);
/// `create` answers `201`, or `400 invalid_value` for a value the database refuses; `handler`
/// is `create` as a plain handler, for the layer.
macro_rules! items_on {
    ($module:ident, $db:ty, $store:ty, $table:expr, $ddl:literal, $values:literal) => {
        mod $module {
            use super::*;

            pub(crate) async fn harness() -> ($store, App) {
                let store = <$store as TestStore>::fresh().await;
                let items: String = $table(&store);
                sqlx::raw_sql(AssertSqlSafe(format!($ddl, items = items)))
                    .execute(store.pool())
                    .await
                    .unwrap();
                let idem = Idempotency::builder()
                    .store(store.clone())
                    .build()
                    .unwrap();
                let app = App {
                    idem,
                    items: Items(items.into()),
                    runs: Calls::default(),
                };
                (store, app)
            }

            pub(crate) async fn rows(store: &$store, items: &Items) -> i64 {
                let count = format!("SELECT count(*) FROM {}", items.0);
                sqlx::query_scalar(AssertSqlSafe(count))
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }

            pub(crate) async fn clear(store: &$store, items: &Items) {
                sqlx::raw_sql(AssertSqlSafe(format!("DELETE FROM {}", items.0)))
                    .execute(store.pool())
                    .await
                    .unwrap();
            }

            pub(crate) async fn handler(
                State(items): State<Items>,
                State(runs): State<Calls>,
                mut tx: Tx<$db>,
                Json(body): Json<Value>,
            ) -> Response {
                create(&mut tx, &items, &runs, &body).await
            }

            pub(crate) async fn insert(
                tx: &mut Tx<$db>,
                items: &Items,
                body: &Value,
            ) -> Result<(), sqlx::Error> {
                let insert = format!("INSERT INTO {} (name, quantity) VALUES {}", items.0, $values);
                sqlx::query(AssertSqlSafe(insert))
                    .bind(body["name"].as_str().unwrap_or_default())
                    .bind(body["quantity"].as_i64().unwrap_or_default())
                    .execute(tx.conn().await?)
                    .await
                    .map(drop)
            }

            pub(crate) async fn create(
                tx: &mut Tx<$db>,
                items: &Items,
                runs: &Calls,
                body: &Value,
            ) -> Response {
                runs.bump();
                match insert(tx, items, body).await {
                    Ok(()) => (StatusCode::CREATED, Json(body.clone())).into_response(),
                    Err(e) if is_bad_value(&e) => {
                        let problem = json!({ "code": "invalid_value", "detail": e.to_string() });
                        (StatusCode::BAD_REQUEST, Json(problem)).into_response()
                    }
                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
                }
            }
        }
    };
}

items_on!(
    postgres,
    Postgres,
    PostgresStore,
    |store: &PostgresStore| format!("{}.items", store.schema()),
    "CREATE TABLE {items} (name text NOT NULL, quantity integer NOT NULL)",
    "($1, $2)"
);
// SQLite keeps a NUL in text and 64-bit integers: the table declares PostgreSQL's limits.
items_on!(
    sqlite,
    sqlx::Sqlite,
    SqliteStore,
    |_: &SqliteStore| "items".to_owned(),
    "CREATE TABLE {items} (
        name TEXT NOT NULL CHECK (instr(CAST(name AS BLOB), x'00') = 0),
        quantity INTEGER NOT NULL CHECK (quantity BETWEEN -2147483648 AND 2147483647)
    )",
    "($1, $2)"
);
// MariaDB keeps a NUL in `TEXT`; a number out of `INT`'s range fails its statement (strict mode,
// the server's default), not the transaction.
items_on!(
    mysql,
    sqlx::MySql,
    MySqlStore,
    |_: &MySqlStore| "items".to_owned(),
    "CREATE TABLE {items} (name TEXT NOT NULL, quantity INT NOT NULL)",
    "(?, ?)"
);
use postgres::{harness, insert, rows};

/// Whether the database refused a value: PostgreSQL's SQLSTATE class 22 (data exception), or
/// a `CHECK` constraint (how the SQLite table declares PostgreSQL's limits).
fn is_bad_value(error: &sqlx::Error) -> bool {
    let Some(error) = error.as_database_error() else {
        return false;
    };
    error.code().is_some_and(|code| code.starts_with("22"))
        || error.kind() == sqlx::error::ErrorKind::CheckViolation
}

/// The attribute's endpoints on `$db`, with one commit and with two, writing with `$module`.
macro_rules! endpoints_on {
    ($endpoints:ident, $module:ident, $db:ty) => {
        mod $endpoints {
            use super::*;

            #[idempotent(scope = "global", commits = "one")]
            pub(crate) async fn one_commit(
                State(items): State<Items>,
                State(runs): State<Calls>,
                mut tx: Tx<$db>,
                Json(body): Json<Value>,
            ) -> Response {
                $module::create(&mut tx, &items, &runs, &body).await
            }

            #[idempotent(scope = "global", commits = "two")]
            pub(crate) async fn two_commits(
                State(items): State<Items>,
                State(runs): State<Calls>,
                mut tx: Tx<$db>,
                Json(body): Json<Value>,
            ) -> Response {
                $module::create(&mut tx, &items, &runs, &body).await
            }
        }
    };
}

endpoints_on!(postgres_endpoints, postgres, Postgres);
endpoints_on!(mysql_endpoints, mysql, sqlx::MySql);
use postgres_endpoints::{one_commit, two_commits};

async fn post_item(router: &Router, path: &str, key: &str, body: &Value) -> (StatusCode, Value) {
    post_bytes(router, path, key, body.to_string().into_bytes()).await
}

/// `body` as sent, which need not be JSON, nor UTF-8.
async fn post_bytes(router: &Router, path: &str, key: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_answers_400_and_stores_nothing_with_one_commit_or_two() {
    let (store, app) = harness().await;
    let router = Router::new()
        .route("/one", post(one_commit))
        .route("/two", post(two_commits))
        .with_state(app.clone());
    for path in ["/one", "/two"] {
        for (n, bad) in bad_bodies().iter().enumerate() {
            let key = format!("{path}-{n}");
            let before = app.runs.get();
            for attempt in 1..=2 {
                let (status, body) = post_item(&router, path, &key, bad).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {bad}: {body}");
                assert_eq!(body["code"], "invalid_value", "{path} {bad}");
                // Not replayed: nothing was stored, so the retry ran again.
                assert_eq!(app.runs.get(), before + attempt);
            }
            assert_eq!(rows(&store, &app.items).await, 0, "{path} {bad}");
            // The key is free: a good request under it runs, where a stored answer would
            // make it a reused key (422).
            let good = json!({ "name": "a", "quantity": 1 });
            let (status, _) = post_item(&router, path, &key, &good).await;
            assert_eq!(status, StatusCode::CREATED, "{path} {bad}");
            postgres::clear(&store, &app.items).await;
        }
    }
    store.discard().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_programmatic_api_returns_the_operations_error_and_stores_nothing() {
    let (store, app) = harness().await;
    for (n, bad) in bad_bodies().into_iter().enumerate() {
        let key = format!("op-{n}");
        let run = |body: Value| {
            let items = app.items.clone();
            app.idem.operation("bad_values::create").run_atomic(
                key.clone(),
                body,
                move |mut tx: Tx<Postgres>, body: Value| async move {
                    insert(&mut tx, &items, &body).await
                },
            )
        };
        let refused = run(bad.clone()).await;
        assert!(
            matches!(&refused, Err(OperationError::Failed(e)) if is_bad_value(e)),
            "{bad}: {refused:?}"
        );
        assert_eq!(rows(&store, &app.items).await, 0, "{bad}");
        // Nothing stored: a good input under the same key runs, fresh.
        let good = run(json!({ "name": "a", "quantity": 1 })).await;
        assert!(matches!(good, Ok(Outcome::Fresh(()))), "{bad}: {good:?}");
        assert_eq!(rows(&store, &app.items).await, 1, "{bad}");
        postgres::clear(&store, &app.items).await;
    }
    store.discard().await;
}

/// A scope value PostgreSQL's `text` cannot keep (a NUL byte, from a resolver that copies what a
/// caller sent) identifies no caller: `401`, not the "store unavailable, retry" its claim would
/// fail with every time; the handler does not run and nothing is stored. Through the layer, whose
/// scopes the engine resolves as the attribute's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_value_with_a_nul_byte_is_401_not_retryable() {
    a_nul_scope_value_is_refused(harness().await).await;
}

/// The same on MySQL, whose records could keep a NUL: every store gives the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_value_with_a_nul_byte_is_401_on_mysql_too() {
    a_nul_scope_value_is_refused(mysql::harness().await).await;
}

async fn a_nul_scope_value_is_refused<S: TestStore>((store, app): (S, App)) {
    let idem = Idempotency::builder()
        .store(store.clone())
        .scope("tenant", |_| Some("acme\u{0}admin".to_owned()))
        .build()
        .unwrap();
    let runs = app.runs.clone();
    let handler = move || async move {
        runs.bump();
        StatusCode::CREATED
    };
    let router = Router::new()
        .route("/scoped", post(handler))
        .layer(IdempotencyLayer::new(&idem).scope("tenant"));
    for _ in 0..2 {
        let (status, body) = post_item(&router, "/scoped", "k-nul", &json!({})).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(body["code"], "idempotency_scope_unresolved");
    }
    assert_eq!(app.runs.get(), 0);
    let stored = idem.records().list(&RecordFilter::new(), 10).await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    store.discard().await;
}

/// A body that is not UTF-8 where JSON text is expected.
const NOT_UTF8: &[u8] = b"{\"name\": \"a\xff\", \"quantity\": 1}";

/// The layer, over a plain handler taking `Tx<$db>` on `$module`'s items: each value the
/// database refuses is `400 invalid_value`, run again on the retry (nothing was stored to
/// replay), with no row and no record, and the key then takes a good request. Each `$layer`
/// setting is tried: the layer's default (a `400` releases the key), and on PostgreSQL
/// `rejections([])` (every 4xx stored, which the aborted transaction refuses). A body that is
/// not UTF-8 is axum's `400` under the default layer: the handler never runs, nothing is stored.
macro_rules! through_the_layer {
    ($test:ident, $module:ident, $bad:expr, [$($layer:expr),+ $(,)?]) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let (store, app) = $module::harness().await;
            let layers: Vec<fn(IdempotencyLayer) -> IdempotencyLayer> = vec![$($layer),+];
            for (n, layer) in layers.into_iter().enumerate() {
                let router = Router::new()
                    .route("/items", post($module::handler))
                    .layer(layer(IdempotencyLayer::new(&app.idem)))
                    .with_state(app.clone());
                for (m, bad) in $bad.iter().enumerate() {
                    let key = format!("layer-{n}-{m}");
                    let (before, stored) = (app.runs.get(), records(&app.idem).await);
                    for attempt in 1..=2 {
                        let (status, body) = post_item(&router, "/items", &key, bad).await;
                        assert_eq!(status, StatusCode::BAD_REQUEST, "{n}: {bad}: {body}");
                        assert_eq!(body["code"], "invalid_value", "{n}: {bad}");
                        assert_eq!(app.runs.get(), before + attempt, "{n}: {bad}: not replayed");
                    }
                    assert_eq!($module::rows(&store, &app.items).await, 0, "{n}: {bad}");
                    assert_eq!(records(&app.idem).await, stored, "{n}: {bad}");
                    let good = json!({ "name": "a", "quantity": 1 });
                    let (status, _) = post_item(&router, "/items", &key, &good).await;
                    assert_eq!(status, StatusCode::CREATED, "{n}: {bad}: the key is free");
                    $module::clear(&store, &app.items).await;
                }
            }
            let router = Router::new()
                .route("/items", post($module::handler))
                .layer(IdempotencyLayer::new(&app.idem))
                .with_state(app.clone());
            let (before, stored) = (app.runs.get(), records(&app.idem).await);
            for _ in 0..2 {
                let (status, _) = post_bytes(&router, "/items", "utf8", NOT_UTF8.to_vec()).await;
                assert_eq!(status, StatusCode::BAD_REQUEST, "not UTF-8");
            }
            assert_eq!(app.runs.get(), before, "the handler never ran");
            assert_eq!(records(&app.idem).await, stored, "not UTF-8");
            store.discard().await;
        }
    };
}

through_the_layer!(
    the_layer_answers_400_and_stores_nothing_on_postgres,
    postgres,
    bad_bodies(),
    [|layer| layer, |layer| layer.rejections([])]
);
through_the_layer!(
    the_layer_answers_400_and_stores_nothing_on_sqlite,
    sqlite,
    bad_bodies(),
    [|layer| layer]
);
// A 400 the layer keeps (`rejections([])`) is stored on MySQL: `mysql_...` below.
through_the_layer!(
    the_layer_answers_400_and_stores_nothing_on_mysql,
    mysql,
    [out_of_range()],
    [|layer| layer]
);

/// How many records the engine's store holds.
async fn records(idem: &Idempotency) -> usize {
    let listed = idem.records().list(&RecordFilter::new(), 100).await;
    listed.unwrap().len()
}

/// On MySQL, the attribute's endpoints (`commits = "one"` commits twice there). MariaDB keeps a
/// NUL in `TEXT`: that request is an ordinary one (201, replayed, the name read back byte for
/// byte). A number out of `INT`'s range is refused (SQLSTATE 22003) but, unlike PostgreSQL,
/// MySQL fails only that statement and the transaction goes on: the handler's `400` is a 4xx
/// like any other, stored with the transaction's writes (none here) and replayed. The first
/// answer is PostgreSQL's, `400 invalid_value`, never a 503; a retry gets it again without
/// running; the key then holds that answer, so another body under it is 422 where PostgreSQL,
/// having stored nothing, would run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_keeps_a_nul_and_stores_the_400_of_a_number_out_of_range() {
    let (store, app) = mysql::harness().await;
    let router = Router::new()
        .route("/one", post(mysql_endpoints::one_commit))
        .route("/two", post(mysql_endpoints::two_commits))
        .with_state(app.clone());
    let good = json!({ "name": "a", "quantity": 1 });
    for path in ["/one", "/two"] {
        let nul = json!({ "name": "a\u{0}b", "quantity": 1 });
        let before = app.runs.get();
        for _ in 0..2 {
            let (status, body) = post_item(&router, path, &format!("{path}-nul"), &nul).await;
            assert_eq!((status, &body), (StatusCode::CREATED, &nul), "{path}");
        }
        assert_eq!(app.runs.get(), before + 1, "{path}: the retry replayed");
        let names: Vec<Vec<u8>> = sqlx::query_scalar("SELECT CAST(name AS BINARY) FROM items")
            .fetch_all(store.pool())
            .await
            .unwrap();
        assert_eq!(names, [b"a\0b".to_vec()], "{path}: kept byte for byte");
        mysql::clear(&store, &app.items).await;

        let key = format!("{path}-range");
        let before = app.runs.get();
        for _ in 0..2 {
            let (status, body) = post_item(&router, path, &key, &out_of_range()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
            assert_eq!(body["code"], "invalid_value", "{path}");
        }
        assert_eq!(
            app.runs.get(),
            before + 1,
            "{path}: the stored 400 replayed"
        );
        assert_eq!(mysql::rows(&store, &app.items).await, 0, "{path}");
        let (status, body) = post_item(&router, path, &key, &good).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
    }
    store.discard().await;
}

/// On MySQL, the programmatic API: a closure that returns the database's refusal gets it back,
/// its transaction rolled back and nothing stored, as on PostgreSQL; a NUL is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_the_programmatic_api_returns_the_operations_error_and_stores_nothing() {
    let (store, app) = mysql::harness().await;
    let run = |key: &str, body: Value| {
        let items = app.items.clone();
        app.idem.operation("bad_values::create").run_atomic(
            key.to_owned(),
            body,
            move |mut tx: Tx<sqlx::MySql>, body: Value| async move {
                mysql::insert(&mut tx, &items, &body).await
            },
        )
    };
    let refused = run("range", out_of_range()).await;
    assert!(
        matches!(&refused, Err(OperationError::Failed(e)) if is_bad_value(e)),
        "{refused:?}"
    );
    assert_eq!(mysql::rows(&store, &app.items).await, 0);
    let good = run("range", json!({ "name": "a", "quantity": 1 })).await;
    assert!(matches!(good, Ok(Outcome::Fresh(()))), "{good:?}");
    let nul = run("nul", json!({ "name": "a\u{0}b", "quantity": 1 })).await;
    assert!(matches!(nul, Ok(Outcome::Fresh(()))), "{nul:?}");
    assert_eq!(mysql::rows(&store, &app.items).await, 2);
    store.discard().await;
}
