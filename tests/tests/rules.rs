//! One definition per rule, one behaviour through every face: the key syntax (the attribute,
//! the layer, the programmatic API and the client), the TTL bounds (the attribute refuses them
//! at compile time, `ui/tests/ui/fail/ttl_too_*`; the layer and the programmatic API where they
//! are set), a scope without a resolver, and the body limit with the application's rendering of
//! the engine's answers.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use http_body_util::BodyExt;
use idem_runtime::IdempotencyLayer;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, IdempotencyKey, OperationError, Rejection, idempotent};
use tower::ServiceExt;

#[idempotent(scope = "global")]
async fn echo(body: String) -> String {
    body
}

async fn plain_echo(body: String) -> String {
    body
}

/// An engine whose scopes are `"global"` only; the start-up checks are left to the test of
/// them below, whose endpoint names a scope without a resolver.
fn idempotency() -> Idempotency {
    Idempotency::builder()
        .store(MemoryStore::new())
        .max_request_bytes(16)
        .render_rejections(|rejection: &Rejection| {
            format!("app format: {}", rejection.code()).into_response()
        })
        .build()
        .unwrap()
}

/// The attribute's route and the layer's, on one engine.
fn routers(idempotency: &Idempotency) -> [(&'static str, Router); 2] {
    let attribute = Router::new()
        .route("/echo", post(echo))
        .with_state(idempotency.clone());
    let layer = Router::new()
        .route("/echo", post(plain_echo))
        .layer(IdempotencyLayer::new(idempotency));
    [("attribute", attribute), ("layer", layer)]
}

async fn send(router: &Router, key: &[u8], body: Body) -> (StatusCode, String) {
    let request = Request::post("/echo")
        .header("idempotency-key", key)
        .header("content-type", "text/plain")
        .body(body)
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// Header values that are keys, and that are not, as every face must read them.
const HEADERS: [(&[u8], Option<&str>); 9] = [
    (b"order-1001", Some("order-1001")),
    (b"\"order-1001\"", Some("order-1001")),
    (b"\"\\\"quoted\"", Some("\"quoted")),
    (b"  padded\t", Some("padded")),
    (b"", None),
    (b"two words", None),
    (b"\"unterminated", None),
    (b"caf\xc3\xa9", None),
    (&[b'k'; 256], None),
];

#[tokio::test]
async fn every_face_reads_a_key_by_the_same_rule() {
    let idempotency = idempotency();
    for (header, key) in HEADERS {
        let parsed = IdempotencyKey::parse(header).ok();
        assert_eq!(
            parsed.as_ref().map(IdempotencyKey::as_str),
            key,
            "{header:?}"
        );
        for (face, router) in routers(&idempotency) {
            let (status, body) = send(&router, header, Body::from("hi")).await;
            match key {
                Some(_) => assert_eq!(status, StatusCode::OK, "{face} {header:?}: {body}"),
                None => {
                    assert_eq!(status, StatusCode::BAD_REQUEST, "{face} {header:?}");
                    assert_eq!(body, "app format: idempotency_key_invalid", "{face}");
                }
            }
        }
        let Ok(text) = std::str::from_utf8(header) else {
            continue;
        };
        // The programmatic API and the client take the key itself, not its header form: the
        // key a header names is accepted by both, and travels back in the client's header.
        if let Some(key) = key {
            let ran = idempotency
                .operation("rules::echo")
                .run(key, (), |()| async { Ok::<_, std::io::Error>(1) })
                .await;
            assert!(ran.is_ok(), "{key:?}: {ran:?}");
            let client = idem_client::IdempotencyKey::new(key).expect("the client accepts it");
            assert_eq!(client.as_str(), key);
            assert_eq!(
                idem_rules::key::parse_header(idem_rules::key::to_header(key).as_bytes()).unwrap(),
                key
            );
        } else if !text.starts_with('"') {
            // A header's key is refused as a key too (unquoted forms only: a quoted header is a
            // key's encoding, not the key).
            let refused = idempotency
                .operation("rules::echo")
                .run(text, (), |()| async { Ok::<_, std::io::Error>(1) })
                .await;
            assert!(
                matches!(refused, Err(OperationError::InvalidKey(_))),
                "{text:?}"
            );
            assert!(idem_client::IdempotencyKey::new(text).is_err(), "{text:?}");
        }
    }
}

#[tokio::test]
async fn every_face_refuses_a_body_over_the_limit_in_the_applications_format() {
    let idempotency = idempotency();
    let large = "x".repeat(17);
    for (face, router) in routers(&idempotency) {
        // Declared too large: refused before the body is read.
        let (status, body) = send(&router, b"big", Body::from(large.clone())).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{face}");
        assert_eq!(body, "app format: payload_too_large", "{face}");
        // Streamed without a length: refused once it grows past the limit.
        let (status, body) = send(&router, b"big-stream", Body::new(Chunks::of(&large))).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{face}");
        assert_eq!(body, "app format: payload_too_large", "{face}");
        // At the limit: accepted.
        let (status, _) = send(&router, b"fits", Body::from("x".repeat(16))).await;
        assert_eq!(status, StatusCode::OK, "{face}");
    }
}

/// A body sent in 4-byte chunks, with no declared length.
struct Chunks(std::collections::VecDeque<bytes::Bytes>);

impl Chunks {
    fn of(text: &str) -> Self {
        Self(
            text.as_bytes()
                .chunks(4)
                .map(bytes::Bytes::copy_from_slice)
                .collect(),
        )
    }
}

impl http_body::Body for Chunks {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        std::task::Poll::Ready(
            self.0
                .pop_front()
                .map(|chunk| Ok(http_body::Frame::data(chunk))),
        )
    }
}

fn panic_message(f: impl FnOnce()) -> String {
    let panic = catch_unwind(AssertUnwindSafe(f)).expect_err("a panic");
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn the_layer_and_the_programmatic_api_refuse_the_attributes_ttl_bounds_alike() {
    let idempotency = idempotency();
    let rule = idem_rules::ttl::check(Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    for (setter, ttl) in [
        ("short", Duration::from_millis(500)),
        ("long", Duration::from_secs(31 * 86_400)),
    ] {
        let rule = idem_rules::ttl::check(ttl).unwrap_err().to_string();
        let layer = panic_message(|| drop(IdempotencyLayer::new(&idempotency).ttl(ttl)));
        let route =
            panic_message(|| drop(IdempotencyLayer::new(&idempotency).route("/a", |r| r.ttl(ttl))));
        let operation = panic_message(|| drop(idempotency.operation("rules::op").ttl(ttl)));
        for (face, message) in [("layer", layer), ("route", route), ("operation", operation)] {
            assert!(message.ends_with(&rule), "{setter} {face}: {message}");
        }
    }
    assert!(rule.contains("1 s ..= 30 days"), "{rule}");
    // The bounds themselves are accepted everywhere.
    for ttl in [idem_rules::ttl::MIN_TTL, idem_rules::ttl::MAX_TTL] {
        drop(
            IdempotencyLayer::new(&idempotency)
                .ttl(ttl)
                .route("/a", |r| r.ttl(ttl)),
        );
        drop(idempotency.operation("rules::op").ttl(ttl));
    }
}

#[test]
fn the_layer_and_the_programmatic_api_follow_the_attributes_name_rule() {
    // The attribute refuses these at compile time: `ui/tests/ui/fail/invalid_name.rs`.
    let idempotency = idempotency();
    for bad in ["", " charges", "a\nb"] {
        let rule = idem_rules::name::validate(bad).unwrap_err().to_string();
        let route = panic_message(|| {
            drop(IdempotencyLayer::new(&idempotency).route("/a", |r| r.name(bad)))
        });
        let operation = panic_message(|| drop(idempotency.operation(bad)));
        assert_eq!(route, format!("RouteSettings::name: {rule}"), "{bad:?}");
        assert_eq!(
            operation,
            format!("Idempotency::operation: {rule}"),
            "{bad:?}"
        );
    }
    drop(IdempotencyLayer::new(&idempotency).route("/a", |r| r.name("charges.create")));
    drop(idempotency.operation("jobs::submit"));
}

#[test]
fn a_scope_without_a_resolver_is_refused_at_start_up_with_one_message() {
    #[idempotent(scope = "tenant")]
    async fn scoped() {}

    let built = Idempotency::builder()
        .store(MemoryStore::new())
        .serves(scoped)
        .build()
        .unwrap_err()
        .to_string();
    let idempotency = idempotency();
    let layer = panic_message(|| drop(IdempotencyLayer::new(&idempotency).scope("tenant")));
    let rule = "scope \"tenant\" has no resolver: call `.scope(\"tenant\", |caller| ..)` on \
                `Idempotency::builder()`, or use \"global\"";
    assert!(built.ends_with(rule), "{built}");
    assert!(layer.ends_with(rule), "{layer}");
}
