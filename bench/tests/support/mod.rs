//! What the round-trip tests share: the database, a schema of their own, the counting proxy in
//! front of the database, and a request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use idem_bench::body;
use idem_bench::pgcount::{self, Counters};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};
use tower::ServiceExt;

/// The database the tests use: `DATABASE_URL` when it names PostgreSQL, else the local one.
fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The database's options, a pool of one connection to it for the test's own statements, and
/// a fresh schema `<prefix>_<pid>_<nanos>` created there.
pub(crate) async fn fresh_schema(prefix: &str) -> (PgConnectOptions, PgPool, String) {
    let options: PgConnectOptions = database_url().parse().expect("DATABASE_URL");
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.clone())
        .await
        .expect("PostgreSQL at DATABASE_URL (or 127.0.0.1:5432, database test)");
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let schema = format!("{prefix}_{}_{nanos}", std::process::id());
    sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .expect("create schema");
    (options, admin, schema)
}

/// The counting proxy in front of the database `options` name: its address and its counters.
pub(crate) async fn proxy(options: &PgConnectOptions) -> (SocketAddr, Arc<Counters>) {
    let upstream = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .expect("database host")
        .next()
        .expect("an address");
    pgcount::start(upstream).await.expect("proxy")
}

/// POSTs the bench's 1 KB order to `route` under `key`: the response's status.
pub(crate) async fn post(router: &Router, route: &str, key: &str) -> StatusCode {
    let request = Request::post(route)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body::json(1024)))
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    response.status()
}
