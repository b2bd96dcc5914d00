//! A service in atomic mode on diesel-async (`DieselTx`), in a schema of its own: items
//! written with `sql_query`, the same routes in one commit and in two.
//!
//! (Its own module of each test that uses it, as `app.rs` is, so that its endpoints are
//! registered only in the binaries that build an engine lending diesel transactions.)
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use diesel::sql_types::Text;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use http_body_util::BodyExt;
use idem_runtime::{Idempotency, idempotent};
use idem_tokio_postgres::TokioPostgresStore;
use idem_tokio_postgres::diesel::{DieselPool, DieselTx};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::support::{Schemas, pool_at};

#[derive(Clone, FromRef)]
pub struct App {
    pub idem: Idempotency,
    pub items: Items,
}

#[derive(Clone)]
pub struct Items {
    pub table: Arc<str>,
    pub runs: Arc<AtomicUsize>,
    pub pool: DieselPool,
    /// `{"gate": true}` handlers add a permit to `entered`, then wait for one of `released`.
    pub entered: Arc<Semaphore>,
    pub released: Arc<Semaphore>,
}

fn diesel_pool(url: &str, max: usize) -> DieselPool {
    let mut config = ManagerConfig::default();
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config(url, config);
    DieselPool::builder(manager).max_size(max).build().unwrap()
}

fn insert(table: &str) -> String {
    format!("INSERT INTO {table} (name) VALUES ($1)")
}

/// Inserts the body's `name`; answers its `status` (201).
async fn write(items: &Items, tx: &mut DieselTx, body: &Value) -> Response {
    items.runs.fetch_add(1, Ordering::SeqCst);
    let name = body["name"].as_str().unwrap_or("item").to_owned();
    let conn = match tx.conn().await {
        Ok(conn) => conn,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let inserted = diesel::sql_query(insert(&items.table))
        .bind::<Text, _>(&name)
        .execute(conn)
        .await;
    if let Err(e) = inserted {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    if body["gate"] == true {
        items.entered.add_permits(1);
        items.released.acquire().await.unwrap().forget();
    }
    let status = StatusCode::from_u16(body["status"].as_u64().unwrap_or(201) as u16).unwrap();
    (status, Json(json!({ "name": name }))).into_response()
}

#[idempotent(scope = "global")]
async fn one(State(items): State<Items>, mut tx: DieselTx, Json(b): Json<Value>) -> Response {
    write(&items, &mut tx, &b).await
}

#[idempotent(scope = "global", commits = "two")]
async fn two(State(items): State<Items>, mut tx: DieselTx, Json(b): Json<Value>) -> Response {
    write(&items, &mut tx, &b).await
}

#[idempotent(scope = "global", name = "items.mixed")]
async fn mixed_one(State(items): State<Items>, mut tx: DieselTx, Json(b): Json<Value>) -> Response {
    write(&items, &mut tx, &b).await
}

#[idempotent(scope = "global", name = "items.mixed", commits = "two")]
async fn mixed_two(State(items): State<Items>, mut tx: DieselTx, Json(b): Json<Value>) -> Response {
    write(&items, &mut tx, &b).await
}

/// `kept`, then `undone` in a nested transaction (a savepoint) that fails, then `inner` in one
/// that succeeds.
#[idempotent(scope = "global")]
async fn nested(State(items): State<Items>, mut tx: DieselTx) -> StatusCode {
    let sql = insert(&items.table);
    let conn = tx.conn().await.unwrap();
    let kept = diesel::sql_query(&sql).bind::<Text, _>("kept");
    kept.execute(conn).await.unwrap();
    let undone = conn
        .transaction(async |c| {
            let q = diesel::sql_query(&sql).bind::<Text, _>("undone");
            q.execute(c).await?;
            Err::<(), _>(diesel::result::Error::RollbackTransaction)
        })
        .await;
    assert!(undone.is_err());
    conn.transaction(async |c| {
        let q = diesel::sql_query(&sql).bind::<Text, _>("inner");
        q.execute(c).await.map(drop)
    })
    .await
    .unwrap();
    StatusCode::CREATED
}

/// The same write without idem, on the diesel pool.
async fn bare(State(items): State<Items>) -> StatusCode {
    let mut conn = items.pool.get().await.unwrap();
    let q = diesel::sql_query(insert(&items.table)).bind::<Text, _>("bare");
    q.execute(&mut conn).await.unwrap();
    StatusCode::CREATED
}

#[derive(Clone)]
pub struct Harness {
    pub router: Router,
    pub items: Items,
    pub store: TokioPostgresStore,
    pub idem: Idempotency,
}

/// A store in a fresh schema, with `connections` in its diesel pool.
pub async fn harness(schemas: &Schemas, at: &str, connections: usize) -> Harness {
    harness_with(schemas, at, connections, |b| b).await
}

/// The same, with engine settings of the test's.
pub async fn harness_with(
    schemas: &Schemas,
    at: &str,
    connections: usize,
    settings: impl FnOnce(idem_runtime::Builder) -> idem_runtime::Builder,
) -> Harness {
    harness_at(&schemas.fresh(), at, connections, settings).await
}

/// In `schema`, made (with its `items` table) if missing: another process may share it.
pub async fn harness_at(
    schema: &str,
    at: &str,
    connections: usize,
    settings: impl FnOnce(idem_runtime::Builder) -> idem_runtime::Builder,
) -> Harness {
    let diesel = diesel_pool(at, connections);
    let store = TokioPostgresStore::builder(pool_at(at, 2))
        .schema(schema)
        .diesel(diesel.clone())
        .build()
        .await
        .unwrap();
    let table: Arc<str> = format!("\"{}\".items", store.schema()).into();
    let ddl = format!(
        "CREATE TABLE IF NOT EXISTS {table} (id bigserial PRIMARY KEY, name text NOT NULL)"
    );
    let client = store.pool().get().await.unwrap();
    client.batch_execute(&ddl).await.unwrap();
    let idem = settings(Idempotency::builder().store(store.clone()))
        .build()
        .unwrap();
    let items = Items {
        table,
        runs: Arc::default(),
        pool: diesel,
        entered: Arc::new(Semaphore::new(0)),
        released: Arc::new(Semaphore::new(0)),
    };
    let router = Router::new()
        .route("/one", post(one))
        .route("/two", post(two))
        .route("/mixed-one", post(mixed_one))
        .route("/mixed-two", post(mixed_two))
        .route("/nested", post(nested))
        .route("/bare", post(bare))
        .with_state(App {
            idem: idem.clone(),
            items: items.clone(),
        });
    Harness {
        router,
        items,
        store,
        idem,
    }
}

impl Harness {
    pub async fn send(&self, path: &str, key: &str, body: Value) -> (StatusCode, bool) {
        let request = Request::post(path)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let status = response.status();
        let _ = response.into_body().collect().await;
        (status, replayed)
    }

    pub async fn names(&self) -> Vec<String> {
        let sql = format!("SELECT name FROM {} ORDER BY id", self.items.table);
        let client = self.store.pool().get().await.unwrap();
        let rows = client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }
}

/// Retries until the answer is neither 409 nor 503, for at most ten seconds.
pub async fn settle(h: &Harness, path: &str, key: &str, body: Value) -> (StatusCode, bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let reply = h.send(path, key, body.clone()).await;
        let busy = matches!(
            reply.0,
            StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE
        );
        if !busy || std::time::Instant::now() > deadline {
            return reply;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
