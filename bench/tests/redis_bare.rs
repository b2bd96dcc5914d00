//! The Redis baseline answers as the bare handler does once Redis has answered its `GET`, and
//! fails when the `GET` does: a baseline that answered something else, or did not wait on Redis,
//! would skew every ratio taken against it.

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use idem_bench::{body, redis_bare};
use tower::ServiceExt;

/// The Redis the tests use: `REDIS_URL`, else the local one.
fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

fn order() -> Request<Body> {
    Request::post(redis_bare::REDIS_BARE)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body::json(1024)))
        .expect("request")
}

#[tokio::test]
async fn answers_as_the_bare_handler_after_reading_the_key_and_fails_closed_without_it() {
    let url = redis_url();
    let router = redis_bare::router(&url).await.expect("connect");

    let response = router.clone().oneshot(order()).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::CREATED);
    assert!(response.headers().contains_key(http::header::LOCATION));
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
    assert_eq!(answer["status"], "accepted");

    // The key turned into a hash: the `GET` fails, and so does the request, before the
    // handler's work. The baseline waits on Redis for every request it answers.
    let mut conn = redis::Client::open(url.as_str())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::pipe()
        .del(redis_bare::KEY)
        .hset(redis_bare::KEY, "field", "value")
        .exec_async(&mut conn)
        .await
        .expect("replace the key");
    let response = router.oneshot(order()).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    redis::cmd("DEL")
        .arg(redis_bare::KEY)
        .exec_async(&mut conn)
        .await
        .expect("clean up");
}
