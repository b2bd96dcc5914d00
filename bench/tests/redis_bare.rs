//! The Redis baseline answers as the bare handler does once Redis has answered its `GET`: a
//! baseline that answered something else would skew every ratio taken against it.

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
async fn answers_as_the_bare_handler_after_reading_the_key() {
    let router = redis_bare::router(&redis_url()).await.expect("connect");
    let response = router.oneshot(order()).await.expect("infallible");
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
}
