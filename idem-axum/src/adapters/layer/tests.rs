//! The layer's own rules, through `Router` + `oneshot` on the memory store. The engine behaviour
//! suite (tests/tests/engine) runs every shared rule through the layer on every store.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Path, State};
use axum::routing::post;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::*;
use idem_core::clock::ManualClock;
use idem_core::store::MemoryStore;

#[derive(Clone, Default)]
struct Calls(Arc<AtomicUsize>);

impl Calls {
    fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

async fn handler(State(calls): State<Calls>) -> (StatusCode, String) {
    let call = calls.0.fetch_add(1, Ordering::SeqCst) + 1;
    (StatusCode::CREATED, format!("call {call}"))
}

async fn with_status(State(calls): State<Calls>, Path(code): Path<u16>) -> StatusCode {
    calls.0.fetch_add(1, Ordering::SeqCst);
    StatusCode::from_u16(code).unwrap()
}

fn idempotency(clock: &ManualClock) -> Idempotency {
    Idempotency::builder()
        .store(MemoryStore::new())
        .scope("user", |caller| {
            caller.metadata("x-user").map(str::to_owned)
        })
        .clock(clock.clone())
        .build()
        .unwrap()
}

struct App {
    router: Router,
    calls: Calls,
    clock: ManualClock,
}

/// Every test route under the layer `configure` makes of a fresh engine.
fn app(configure: impl FnOnce(IdempotencyLayer) -> IdempotencyLayer) -> App {
    let clock = ManualClock::new();
    let calls = Calls::default();
    let layer = configure(IdempotencyLayer::new(idempotency(&clock)));
    let every = post(handler)
        .put(handler)
        .patch(handler)
        .delete(handler)
        .get(handler);
    // `route_layer` works as `layer` does: both run after routing.
    let api = Router::new()
        .route("/nested", post(handler))
        .route_layer(layer.clone());
    let router = Router::new()
        .route("/items", every)
        .route("/short", post(handler))
        .route("/shared", post(handler))
        .route("/skipped", post(handler))
        .route("/status/{code}", post(with_status))
        .layer(layer)
        .nest("/api", api)
        .with_state(calls.clone());
    App {
        router,
        calls,
        clock,
    }
}

struct Reply {
    status: StatusCode,
    replayed: bool,
    code: Option<String>,
}

impl App {
    async fn send(&self, request: http::Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let code = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|doc| doc["code"].as_str().map(str::to_owned));
        Reply {
            status,
            replayed,
            code,
        }
    }
}

fn request(method: Method, uri: &str, key: Option<&str>, user: &str) -> http::Request<Body> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("x-user", user);
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from("{}")).unwrap()
}

fn post_as(uri: &str, key: Option<&str>, user: &str) -> http::Request<Body> {
    request(Method::POST, uri, key, user)
}

#[tokio::test]
async fn post_put_and_patch_are_covered_and_other_methods_are_not() {
    let app = app(|layer| layer);
    for method in [Method::POST, Method::PUT, Method::PATCH] {
        let first = app
            .send(request(method.clone(), "/items", Some("k"), "a"))
            .await;
        let retry = app
            .send(request(method.clone(), "/items", Some("k"), "a"))
            .await;
        assert_eq!(first.status, StatusCode::CREATED, "{method}");
        assert!(!first.replayed && retry.replayed, "{method}");
    }
    assert_eq!(
        app.calls.get(),
        3,
        "one record per method and route: `POST /items` is not `PUT /items`"
    );
    for method in [Method::DELETE, Method::DELETE, Method::GET] {
        let reply = app
            .send(request(method.clone(), "/items", Some("k"), "a"))
            .await;
        assert!(!reply.replayed, "{method} is not covered by default");
    }
    assert_eq!(app.calls.get(), 6);

    let app = self::app(|layer| layer.methods([Method::DELETE]));
    for _ in 0..2 {
        app.send(request(Method::PUT, "/items", Some("k"), "a"))
            .await;
    }
    assert_eq!(app.calls.get(), 2, "PUT is no longer covered");
    app.send(request(Method::DELETE, "/items", Some("k"), "a"))
        .await;
    let retry = app
        .send(request(Method::DELETE, "/items", Some("k"), "a"))
        .await;
    assert!(retry.replayed);
    assert_eq!(app.calls.get(), 3);
}

/// A request body that remembers whether it was read; 8 bytes a frame, `frames` frames, no
/// size hint (as a chunked upload).
struct Probe {
    read: Arc<AtomicBool>,
    frames: usize,
}

impl HttpBody for Probe {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        self.read.store(true, Ordering::SeqCst);
        if self.frames == 0 {
            return Poll::Ready(None);
        }
        self.frames -= 1;
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            b"01234567",
        )))))
    }
}

fn probe(frames: usize) -> (Body, Arc<AtomicBool>) {
    let read = Arc::new(AtomicBool::new(false));
    let body = Body::new(Probe {
        read: read.clone(),
        frames,
    });
    (body, read)
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_the_body_is_read() {
    let app = app(|layer| layer.max_request_bytes(16));
    let (body, read) = probe(1000);
    let request = http::Request::post("/items")
        .header("idempotency-key", "k")
        .header("content-length", "8000")
        .body(body)
        .unwrap();
    let reply = app.send(request).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code.as_deref(), Some("payload_too_large"));
    assert!(
        !read.load(Ordering::SeqCst),
        "refused from Content-Length alone"
    );
    assert_eq!(app.calls.get(), 0);
}

#[tokio::test]
async fn a_streamed_body_over_the_limit_is_413_and_claims_nothing() {
    let app = app(|layer| layer.max_request_bytes(16));
    let (body, _) = probe(3);
    let request = http::Request::post("/items")
        .header("idempotency-key", "k")
        .body(body)
        .unwrap();
    let reply = app.send(request).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(reply.code.as_deref(), Some("payload_too_large"));
    assert_eq!(app.calls.get(), 0);
    // At the limit it runs, with the same key: nothing was claimed.
    let (body, _) = probe(2);
    let request = http::Request::post("/items")
        .header("idempotency-key", "k")
        .body(body)
        .unwrap();
    assert_eq!(app.send(request).await.status, StatusCode::CREATED);
    // Without a key the layer reads nothing: the handler's own limits apply.
    let (body, _) = probe(3);
    let request = http::Request::post("/items").body(body).unwrap();
    assert_eq!(app.send(request).await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn by_default_records_live_24_hours_and_bodies_may_be_2_mib() {
    let app = app(|layer| layer);
    app.send(post_as("/items", Some("k"), "a")).await;
    app.clock.advance(Duration::from_secs(24 * 60 * 60 - 1));
    assert!(app.send(post_as("/items", Some("k"), "a")).await.replayed);
    app.clock.advance(Duration::from_secs(2));
    assert!(!app.send(post_as("/items", Some("k"), "a")).await.replayed);

    let declared = |len: usize| {
        let (body, read) = probe(0);
        let request = http::Request::post("/items")
            .header("idempotency-key", format!("len-{len}"))
            .header("content-length", len.to_string())
            .body(body)
            .unwrap();
        (request, read)
    };
    let (request, read) = declared(2 * 1024 * 1024 + 1);
    assert_eq!(
        app.send(request).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    assert!(!read.load(Ordering::SeqCst));
    let (request, read) = declared(2 * 1024 * 1024);
    assert_eq!(app.send(request).await.status, StatusCode::CREATED);
    assert!(read.load(Ordering::SeqCst), "read and fingerprinted");
}

#[tokio::test]
async fn routes_override_the_ttl_and_the_scope() {
    let app = app(|layer| {
        layer
            .scope("user")
            .route("/short", |route| route.ttl(Duration::from_secs(60)))
            .route("/shared", |route| route.scope("global"))
    });
    app.send(post_as("/short", Some("k"), "a")).await;
    app.send(post_as("/items", Some("k"), "a")).await;
    app.clock.advance(Duration::from_secs(61));
    assert!(!app.send(post_as("/short", Some("k"), "a")).await.replayed);
    assert!(
        app.send(post_as("/items", Some("k"), "a")).await.replayed,
        "the layer's 24 h still holds elsewhere"
    );
    // Per user by default; one key space on the route scoped "global".
    assert!(!app.send(post_as("/items", Some("k"), "b")).await.replayed);
    app.send(post_as("/shared", Some("k"), "a")).await;
    assert!(app.send(post_as("/shared", Some("k"), "b")).await.replayed);
    assert_eq!(app.calls.get(), 5);
}

#[tokio::test]
async fn skipped_routes_are_left_alone() {
    let app = app(|layer| layer.key(KeyMode::Required).skip("/skipped"));
    let missing = app.send(post_as("/items", None, "a")).await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.code.as_deref(), Some("idempotency_key_missing"));
    assert_eq!(
        app.send(post_as("/skipped", None, "a")).await.status,
        StatusCode::CREATED
    );
    for _ in 0..2 {
        let reply = app.send(post_as("/skipped", Some("k"), "a")).await;
        assert!(!reply.replayed);
    }
    assert_eq!(app.calls.get(), 3);
}

#[tokio::test]
async fn overrides_name_routes_with_the_prefixes_of_nest() {
    let app = app(|layer| layer.route("/api/nested", |route| route.ttl(Duration::from_secs(60))));
    app.send(post_as("/api/nested", Some("k"), "a")).await;
    assert!(
        app.send(post_as("/api/nested", Some("k"), "a"))
            .await
            .replayed
    );
    app.clock.advance(Duration::from_secs(61));
    assert!(
        !app.send(post_as("/api/nested", Some("k"), "a"))
            .await
            .replayed
    );
    assert_eq!(app.calls.get(), 2);
}

#[tokio::test]
async fn rejection_statuses_release_the_key_and_other_client_errors_are_stored() {
    let app = app(|layer| layer);
    for code in [400, 401, 403, 405, 413, 415, 422] {
        let uri = format!("/status/{code}");
        let first = app.send(post_as(&uri, Some("k"), "a")).await;
        let retry = app.send(post_as(&uri, Some("k"), "a")).await;
        assert_eq!(first.status.as_u16(), code);
        assert!(!retry.replayed, "{code} is a rejection: the retry runs");
    }
    assert_eq!(app.calls.get(), 14);
    let first = app.send(post_as("/status/409", Some("k"), "a")).await;
    let retry = app.send(post_as("/status/409", Some("k"), "a")).await;
    assert_eq!(first.status, StatusCode::CONFLICT);
    assert!(
        retry.replayed,
        "a business 409 is the handler's answer: stored"
    );
    assert_eq!(app.calls.get(), 15);

    let app = self::app(|layer| layer.rejections([]));
    app.send(post_as("/status/422", Some("k"), "a")).await;
    let retry = app.send(post_as("/status/422", Some("k"), "a")).await;
    assert!(retry.replayed, "every 4xx is stored");

    let app = self::app(|layer| layer.route("/status/{code}", |route| route.rejections([])));
    app.send(post_as("/status/400", Some("k"), "a")).await;
    let retry = app.send(post_as("/status/400", Some("k"), "a")).await;
    assert!(retry.replayed, "per route too");
}

#[tokio::test]
async fn requests_no_route_matched_are_left_alone() {
    let app = app(|layer| layer.key(KeyMode::Required));
    let reply = app.send(post_as("/nowhere", None, "a")).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "the router's answer");
}

#[test]
#[should_panic(expected = "scope \"tenant\" has no resolver")]
fn a_scope_without_a_resolver_panics() {
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new())).scope("tenant");
}

#[test]
#[should_panic(expected = "scope \"tenant\" has no resolver")]
fn a_route_scope_without_a_resolver_panics() {
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new()))
        .route("/x", |route| route.scope("tenant"));
}

#[test]
#[should_panic(expected = "GET is a safe method")]
fn safe_methods_cannot_be_covered() {
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new()))
        .methods([Method::POST, Method::GET]);
}

#[test]
fn ttls_out_of_range_panic() {
    for ttl in [Duration::ZERO, Duration::from_secs(31 * 86_400)] {
        let result = std::panic::catch_unwind(|| {
            let _ = IdempotencyLayer::new(idempotency(&ManualClock::new())).ttl(ttl);
        });
        assert!(result.is_err(), "{ttl:?}");
    }
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new()))
        .ttl(Duration::from_secs(30 * 86_400))
        .route("/x", |route| route.ttl(Duration::from_secs(1)));
}

#[test]
#[should_panic(expected = "500 Internal Server Error is not a client error")]
fn rejections_must_be_client_errors() {
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new()))
        .rejections([StatusCode::INTERNAL_SERVER_ERROR]);
}

#[test]
#[should_panic(expected = "must be a route pattern starting with `/`")]
fn paths_must_be_route_patterns() {
    let _ = IdempotencyLayer::new(idempotency(&ManualClock::new())).skip("api/stories");
}

/// A request body that sends one frame, then fails (a client that vanished mid-upload).
struct Broken {
    sent: bool,
}

impl HttpBody for Broken {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if std::mem::replace(&mut self.sent, true) {
            return Poll::Ready(Some(Err(std::io::Error::other("connection reset"))));
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(b"{")))))
    }
}

#[tokio::test]
async fn a_body_that_fails_to_arrive_is_400_and_claims_nothing() {
    let app = app(|layer| layer);
    let request = http::Request::post("/items")
        .header("idempotency-key", "k")
        .body(Body::new(Broken { sent: false }))
        .unwrap();
    let reply = app.send(request).await;
    // Not 413: the body was short of the limit, it just never came whole.
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.code.as_deref(), Some("request_body_unreadable"));
    assert_eq!(app.calls.get(), 0);
    let retry = app.send(post_as("/items", Some("k"), "")).await;
    assert_eq!((retry.status, retry.replayed), (StatusCode::CREATED, false));
}

#[tokio::test]
async fn a_layer_inside_another_leaves_the_request_to_the_outer_one() {
    let clock = ManualClock::new();
    let idempotency = idempotency(&clock);
    let calls = Calls::default();
    let router = Router::new()
        .route("/twice", post(handler))
        .route_layer(IdempotencyLayer::new(&idempotency))
        .layer(IdempotencyLayer::new(&idempotency))
        .with_state(calls.clone());
    let app = App {
        router,
        calls,
        clock,
    };
    let first = app.send(post_as("/twice", Some("k"), "a")).await;
    let retry = app.send(post_as("/twice", Some("k"), "a")).await;
    assert_eq!((first.status, first.replayed), (StatusCode::CREATED, false));
    assert_eq!((retry.status, retry.replayed), (StatusCode::CREATED, true));
    assert_eq!(app.calls.get(), 1);
}

#[tokio::test]
async fn a_named_route_keeps_its_records_when_its_pattern_changes() {
    let clock = ManualClock::new();
    let idempotency = idempotency(&clock);
    let calls = Calls::default();
    // One release routes `/items/{id}`, the next `/items/{item}`: the same requests, under the
    // same name; a third release drops the name.
    let release = |pattern: &str, name: Option<&'static str>| {
        let layer = match name {
            Some(name) => {
                IdempotencyLayer::new(&idempotency).route(pattern, move |route| route.name(name))
            }
            None => IdempotencyLayer::new(&idempotency),
        };
        let router = Router::new()
            .route(pattern, post(handler))
            .layer(layer)
            .with_state(calls.clone());
        App {
            router,
            calls: calls.clone(),
            clock: clock.clone(),
        }
    };
    let before = release("/items/{id}", Some("items.update"));
    let after = release("/items/{item}", Some("items.update"));
    let unnamed = release("/items/{item}", None);
    before.send(post_as("/items/7", Some("k"), "a")).await;
    let retry = after.send(post_as("/items/7", Some("k"), "a")).await;
    assert!(retry.replayed, "the name, not the pattern, keys the record");
    let other = unnamed.send(post_as("/items/7", Some("k"), "a")).await;
    assert!(
        !other.replayed,
        "without the name, the pattern is the identity"
    );
    assert_eq!(calls.get(), 2);
}

/// A service that is never ready (a concurrency limit reached, say).
#[derive(Clone)]
struct NeverReady;

impl tower::Service<http::Request<Body>> for NeverReady {
    type Response = StatusCode;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<StatusCode, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Pending
    }

    fn call(&mut self, _: http::Request<Body>) -> Self::Future {
        std::future::ready(Ok(StatusCode::OK))
    }
}

#[test]
fn the_layer_is_ready_when_the_service_it_wraps_is() {
    use tower::{Layer, Service};
    let idempotency = idempotency(&ManualClock::new());
    let mut service = IdempotencyLayer::new(&idempotency).layer(NeverReady);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    // Backpressure passes through: a caller waits instead of queueing work past the limit.
    assert!(service.poll_ready(&mut cx).is_pending());
}
