//! (Its own module of each test that uses it, not of `support`: its `#[idempotent]` endpoints
//! would otherwise be registered in the binaries that run idem-core's fault suite, whose engine
//! then refuses to build on a store wrapped in `Faulty`, which lends no transactions.)
//!
//! An application in atomic mode on this crate's store: items written through a `TokioPostgresTx`, the
//! record completed with them; the same routes in one commit and in two.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use http_body_util::BodyExt;
use idem_runtime::{Idempotency, idempotent};
use idem_tokio_postgres::deadpool_postgres::Pool;
use idem_tokio_postgres::{TokioPostgresStore, TokioPostgresTx, TxError};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::support::Schemas;

/// Holds handlers that ask for it until the test lets them go.
#[derive(Clone)]
pub struct Gate {
    entered: Arc<Semaphore>,
    released: Arc<Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            entered: Arc::new(Semaphore::new(0)),
            released: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Gate {
    async fn pass(&self) {
        self.entered.add_permits(1);
        self.released.acquire().await.unwrap().forget();
    }

    /// Waits until a handler is held.
    pub async fn entered(&self) {
        self.entered.acquire().await.unwrap().forget();
    }

    /// Lets one held handler go.
    pub fn release(&self) {
        self.released.add_permits(1);
    }
}

#[derive(Clone, FromRef)]
pub struct App {
    pub idem: Idempotency,
    pub items: Items,
    pub gate: Gate,
}

/// The application's table, in the store's schema, and the handlers' runs.
#[derive(Clone)]
pub struct Items {
    pub table: Arc<str>,
    pub runs: Arc<AtomicUsize>,
    pub pool: Pool,
}

/// Inserts one item named by the body; `{"status": n}` answers n, `{"gate": true}` waits
/// after the write.
async fn insert(items: &Items, gate: &Gate, tx: &mut TokioPostgresTx, body: &Value) -> Response {
    items.runs.fetch_add(1, Ordering::SeqCst);
    let name = body["name"].as_str().unwrap_or("item").to_owned();
    let sql = format!(
        "INSERT INTO {} (name) VALUES ($1) RETURNING id",
        items.table
    );
    let id: i64 = match tx.query_one(&sql, &[&name]).await {
        Ok(row) => row.get(0),
        Err(error) => return failed(error),
    };
    if body["gate"] == true {
        gate.pass().await;
    }
    let status = body["status"].as_u64().unwrap_or(201) as u16;
    let status = StatusCode::from_u16(status).unwrap();
    (status, Json(json!({ "id": id, "name": name }))).into_response()
}

fn failed(error: TxError) -> Response {
    let body = Json(json!({ "error": error.to_string() }));
    (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
}

#[idempotent(scope = "global")]
async fn one(
    State(items): State<Items>,
    State(gate): State<Gate>,
    mut tx: TokioPostgresTx,
    Json(body): Json<Value>,
) -> Response {
    insert(&items, &gate, &mut tx, &body).await
}

#[idempotent(scope = "global", commits = "two")]
async fn two(
    State(items): State<Items>,
    State(gate): State<Gate>,
    mut tx: TokioPostgresTx,
    Json(body): Json<Value>,
) -> Response {
    insert(&items, &gate, &mut tx, &body).await
}

/// One commit, under an operation name [`mixed_two`] shares.
#[idempotent(scope = "global", name = "items.mixed")]
async fn mixed_one(
    State(items): State<Items>,
    State(gate): State<Gate>,
    mut tx: TokioPostgresTx,
    Json(body): Json<Value>,
) -> Response {
    insert(&items, &gate, &mut tx, &body).await
}

/// The same operation with two commits: its claim commits before it runs.
#[idempotent(scope = "global", name = "items.mixed", commits = "two")]
async fn mixed_two(
    State(items): State<Items>,
    State(gate): State<Gate>,
    mut tx: TokioPostgresTx,
    Json(body): Json<Value>,
) -> Response {
    insert(&items, &gate, &mut tx, &body).await
}

/// Writes `kept`, then `undone` in a savepoint it rolls back, then `inner` in a savepoint of a
/// savepoint, both released.
#[idempotent(scope = "global")]
async fn nested(
    State(items): State<Items>,
    mut tx: TokioPostgresTx,
) -> Result<StatusCode, Response> {
    let sql = format!("INSERT INTO {} (name) VALUES ($1)", items.table);
    tx.execute(&sql, &[&"kept"]).await.map_err(failed)?;
    let mut undone = tx.savepoint().await.map_err(failed)?;
    undone.execute(&sql, &[&"undone"]).await.map_err(failed)?;
    undone.rollback().await.map_err(failed)?;
    let mut outer = tx.savepoint().await.map_err(failed)?;
    outer.execute(&sql, &[&"outer"]).await.map_err(failed)?;
    {
        let mut inner = outer.savepoint().await.map_err(failed)?;
        inner.execute(&sql, &[&"inner"]).await.map_err(failed)?;
        inner.release().await.map_err(failed)?;
    }
    {
        // Dropped without a release: rolls back alone.
        let mut dropped = outer.savepoint().await.map_err(failed)?;
        dropped.execute(&sql, &[&"dropped"]).await.map_err(failed)?;
    }
    outer.release().await.map_err(failed)?;
    Ok(StatusCode::CREATED)
}

/// The same write without idem: what a bare handler costs.
async fn bare(State(items): State<Items>, Json(body): Json<Value>) -> Response {
    let name = body["name"].as_str().unwrap_or("item").to_owned();
    let client = items.pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO {} (name) VALUES ($1) RETURNING id",
        items.table
    );
    let statement = client.prepare_cached(&sql).await.unwrap();
    let id: i64 = client.query_one(&statement, &[&name]).await.unwrap().get(0);
    (StatusCode::CREATED, Json(json!({ "id": id }))).into_response()
}

/// A store in a fresh schema on `pool`, its `items` table, and the routes.
pub struct Harness {
    pub store: TokioPostgresStore,
    pub app: App,
    pub router: Router,
}

impl Harness {
    pub async fn on(schemas: &Schemas, pool: Pool) -> Self {
        Self::with(schemas, pool, |builder| builder).await
    }

    /// With engine settings of the test's.
    pub async fn with(
        schemas: &Schemas,
        pool: Pool,
        settings: impl FnOnce(idem_runtime::Builder) -> idem_runtime::Builder,
    ) -> Self {
        Self::at(&schemas.fresh(), pool, settings).await
    }

    /// In `schema`, made (with its `items` table) if missing: another process's harness may
    /// share it.
    pub async fn at(
        schema: &str,
        pool: Pool,
        settings: impl FnOnce(idem_runtime::Builder) -> idem_runtime::Builder,
    ) -> Self {
        let store = TokioPostgresStore::builder(pool.clone())
            .schema(schema)
            .build()
            .await
            .unwrap();
        let table: Arc<str> = format!("\"{}\".items", store.schema()).into();
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {table} (id bigserial PRIMARY KEY, name text NOT NULL)"
        );
        pool.get().await.unwrap().batch_execute(&ddl).await.unwrap();
        let idem = settings(Idempotency::builder().store(store.clone()))
            .build()
            .unwrap();
        let items = Items {
            table,
            runs: Arc::default(),
            pool,
        };
        let app = App {
            idem,
            items,
            gate: Gate::default(),
        };
        let router = Router::new()
            .route("/one", post(one))
            .route("/two", post(two))
            .route("/mixed-one", post(mixed_one))
            .route("/mixed-two", post(mixed_two))
            .route("/nested", post(nested))
            .route("/bare", post(bare))
            .with_state(app.clone());
        Self { store, app, router }
    }

    /// Sends `body` to `path` under the idempotency key `key`: the status, the body, and
    /// whether it was replayed.
    pub async fn send(&self, path: &str, key: &str, body: Value) -> (StatusCode, Value, bool) {
        send(&self.router, path, key, body).await
    }

    /// The items' names, in order.
    pub async fn names(&self) -> Vec<String> {
        let sql = format!("SELECT name FROM {} ORDER BY id", self.app.items.table);
        let client = self.app.items.pool.get().await.unwrap();
        let rows = client.query(&sql, &[]).await.unwrap();
        rows.iter().map(|row| row.get(0)).collect()
    }

    /// The records of the store by state: (in flight, completed).
    pub async fn records(&self) -> (i64, i64) {
        let sql = format!(
            "SELECT count(*) FILTER (WHERE state = 'in_flight'), \
                    count(*) FILTER (WHERE state = 'completed') \
             FROM \"{}\".idempotency_records",
            self.store.schema()
        );
        let client = self.app.items.pool.get().await.unwrap();
        let row = client.query_one(&sql, &[]).await.unwrap();
        (row.get(0), row.get(1))
    }

    /// How many times the handlers ran.
    pub fn runs(&self) -> usize {
        self.app.items.runs.load(Ordering::SeqCst)
    }

    /// Retries until the answer is not a 409 or 503, for at most `within`.
    pub async fn settle(
        &self,
        path: &str,
        key: &str,
        body: Value,
        within: Duration,
    ) -> (StatusCode, Value, bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let reply = self.send(path, key, body.clone()).await;
            let busy = matches!(
                reply.0,
                StatusCode::CONFLICT | StatusCode::SERVICE_UNAVAILABLE
            );
            if !busy || tokio::time::Instant::now() > deadline {
                return reply;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Sends `body` to `path` of `router` under the idempotency key `key` (none when empty).
pub async fn send(
    router: &Router,
    path: &str,
    key: &str,
    body: Value,
) -> (StatusCode, Value, bool) {
    let mut request = Request::post(path).header("content-type", "application/json");
    if !key.is_empty() {
        request = request.header("idempotency-key", key);
    }
    let request = request.body(Body::from(body.to_string())).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body, replayed)
}
