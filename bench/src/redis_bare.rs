//! The Redis baseline: the bare handler after one `GET` on the Redis server the store uses,
//! through a `ConnectionManager` of its own, with no idem code on the path.
//!
//! A request on the Redis store waits on one multiplexed connection for a script's answer; this
//! handler waits on the same kind of connection for one key's value, then does the bare
//! handler's work. Its settings are redis-rs's defaults, not the store's (other timeout and
//! reconnect values), but each command runs under a response timeout as the store's do. What the two share (a round trip to another process, the connection's driver
//! task waking the request's task) costs the same here without idem, so a scenario paired with
//! this baseline shows what is idem's and what is any Redis client's on the machine.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use redis::aio::ConnectionManager;
use serde_json::Value;

/// Route of the bare handler that reads one key first.
pub const REDIS_BARE: &str = "/redis/bare";

/// The key the handler reads: 200 bytes, about what a stored response holds.
pub const KEY: &str = "idem-bench:control";

/// Connects to `url`, writes the key the handler reads, and returns its route.
///
/// # Errors
///
/// The connection's or the `SET`'s error.
pub async fn router(url: &str) -> redis::RedisResult<Router> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_manager().await?;
    redis::cmd("SET")
        .arg(KEY)
        .arg(vec![b'x'; 200])
        .query_async::<()>(&mut conn)
        .await?;
    Ok(Router::new()
        .route(REDIS_BARE, post(read_then_bare))
        .with_state(conn))
}

/// Reads the key, then answers as the bare handler does; 503 when Redis fails.
async fn read_then_bare(State(mut conn): State<ConnectionManager>, body: Json<Value>) -> Response {
    match redis::cmd("GET")
        .arg(KEY)
        .query_async::<Vec<u8>>(&mut conn)
        .await
    {
        Ok(_) => crate::app::bare(body).await,
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    }
}
