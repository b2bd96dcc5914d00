//! Allocations of a whole fresh request beyond the bare handler's (issue #51): the same 1 KB
//! JSON order through the same handler, bare, under `#[idempotent]` and under
//! `IdempotencyLayer`, on the memory store, counted by a global allocator that counts the calls
//! made on the current thread (the runtime is single-threaded, so every task of a request runs
//! on it). The fingerprint's part is none; the whole is pinned, so the test fails if it grows.
//! The JSON fingerprint alone, warm, allocates nothing either, and a string with escapes only
//! what decoding it takes; nor does a form's.

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::{HeaderValue, Method, Request, StatusCode, Uri, header};
use http_body_util::BodyExt;
use idem_core::fingerprint::Fingerprint;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Idempotency, IdempotencyLayer, idempotent};
use serde_json::{Value, json};
use tower::ServiceExt;

#[path = "support/counting.rs"]
mod counting;

use counting::{allocations, count};

/// The benchmarks' order (bench/src/body.rs) of 1 KB: members out of key order, nested objects,
/// a decimal rewritten.
fn order() -> Bytes {
    let items: Vec<String> = (0..9)
        .map(|i| {
            format!(
                r#"{{"sku":"sku_{i:05}","qty":{},"unit_amount":{},"tax":{{"rate":0.2,"included":false}}}}"#,
                i % 7 + 1,
                199 + i * 13
            )
        })
        .collect();
    let head = format!(
        r#"{{"amount":4200,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","items":[{}],"memo":""#,
        items.join(",")
    );
    let pad = 1024 - head.len() - 2;
    Bytes::from(format!("{head}{}\"}}", "x".repeat(pad)))
}

/// The handler's work, as in the benchmarks: the order parsed, a small JSON answer.
fn create(order: &Value) -> Response {
    let items = order["items"].as_array().map_or(0, Vec::len);
    (
        StatusCode::CREATED,
        [(header::LOCATION, "/v1/orders/ord_1")],
        Json(json!({"id": "ord_1", "object": "order", "items": items, "status": "accepted"})),
    )
        .into_response()
}

async fn bare(Json(order): Json<Value>) -> Response {
    create(&order)
}

#[idempotent(scope = "global")]
async fn idem(Json(order): Json<Value>) -> Response {
    create(&order)
}

/// Allocations of one request (median of 101 after 50 to warm up), key `i` each time: building
/// the request is not counted, sending it and reading the whole response is.
async fn per_request(router: &Router, path: &str, body: &Bytes) -> u64 {
    let mut counts = Vec::new();
    for i in 0..151u64 {
        let request = Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", format!("key-{i:016x}"))
            .body(Body::from(body.clone()))
            .unwrap();
        let router = router.clone();
        let before = count();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED, "{path}");
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let n = count() - before;
        drop(bytes);
        if i >= 50 {
            counts.push(n);
        }
    }
    counts.sort_unstable();
    counts[counts.len() / 2]
}

#[tokio::test(flavor = "current_thread")]
async fn a_fresh_request_allocates_no_more_than_counted_here() {
    let body = order();
    assert_eq!(body.len(), 1024);
    let idempotency = Idempotency::builder()
        .store(MemoryStore::with_capacity(4096))
        .serves(idem)
        .build()
        .unwrap();
    let router = Router::new()
        .route("/bare", post(bare))
        .route("/idem", post(idem))
        .route(
            "/layer",
            post(bare).layer(IdempotencyLayer::new(&idempotency)),
        )
        .with_state(idempotency);

    // The fingerprint and the raw digest of the body, warm: none.
    let (json, uri) = (
        HeaderValue::from_static("application/json"),
        Uri::from_static("/idem"),
    );
    let digests =
        || idem_runtime::__private::fresh_digests(&Method::POST, &uri, Some(&json), &body);
    let first = digests();
    let before = count();
    let again = digests();
    assert_eq!(count() - before, 0, "the fingerprint allocates nothing");
    assert_eq!(again, first);

    let bare = per_request(&router, "/bare", &body).await;
    let attribute = per_request(&router, "/idem", &body).await;
    let layer = per_request(&router, "/layer", &body).await;
    println!(
        "allocations of a fresh 1 KB request: bare {bare}, #[idempotent] {attribute} (+{}), \
         IdempotencyLayer {layer} (+{})",
        attribute - bare,
        layer - bare
    );
    // Today's counts beyond the bare handler's (see the test's run for the split): a fresh
    // request must not allocate more. Lower them when a change removes one.
    assert!(
        attribute - bare <= ATTRIBUTE_EXTRA,
        "#[idempotent]: +{}",
        attribute - bare
    );
    assert!(layer - bare <= LAYER_EXTRA, "layer: +{}", layer - bare);
}

/// Allocations of a fresh 1 KB request under `#[idempotent]` beyond the bare handler's
/// (237), counted 2026-12-02: none in the fingerprint and the raw digest (asserted above). The
/// 31 were not yet split one by one; where they can come from is the engine's and the
/// adapter's own work: the `Previous` closure (boxed, with its copies of the method, URI and
/// `Content-Type`), the memory store's record, the captured response (its body collected, the
/// payload encoded with its envelope, the reply rebuilt from it) and futures boxed on the way.
const ATTRIBUTE_EXTRA: u64 = 31;
/// The same under `IdempotencyLayer` (the operation's name and settings resolved per request).
const LAYER_EXTRA: u64 = 35;

/// A JSON order of about 1 KB like [`order`], with whitespace between its tokens; its memo is
/// `memo` (JSON text, quoted).
fn spaced_order(memo: &str) -> Vec<u8> {
    let items: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#"{{"sku": "sku_{i:05}", "qty": {}, "unit_amount": {}, "tax": {{"rate": 0.2, "included": false}}}}"#,
                i % 7 + 1,
                199 + i * 13
            )
        })
        .collect();
    format!(
        r#"{{"amount":4200,"currency":"usd","customer":"cus_9s6XKzkNRiz8i3","items":[{}],"memo":{memo}}}"#,
        items.join(",")
    )
    .into_bytes()
}

#[test]
fn a_json_fingerprint_allocates_nothing_once_warm() {
    let body = spaced_order("\"caf\u{e9} x\"");
    assert!((900..1500).contains(&body.len()), "{}", body.len());
    // The first fingerprint on a thread grows its buffers.
    let first = Fingerprint::of_json(&body);
    let mut again = None;
    assert_eq!(allocations(|| again = Some(Fingerprint::of_json(&body))), 0);
    assert_eq!(again, Some(first));
    // The HTTP face's fingerprint of the same request body: none either.
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/orders");
    let request =
        || idem_runtime::__private::fingerprint_of_request(&Method::POST, &uri, Some(&json), &body);
    request();
    assert_eq!(allocations(|| _ = request()), 0);
}

#[test]
fn a_form_fingerprint_allocates_nothing_once_warm() {
    // Unsorted names, percent-encoded brackets and a `+`: pairs sorted, parts decoded.
    let body: String = (0..40)
        .map(|i| format!("items%5B{i}%5D%5Bsku%5D=sku+{i:05}&"))
        .chain(["amount=4200&currency=usd".to_owned()])
        .collect();
    let form = HeaderValue::from_static("application/x-www-form-urlencoded");
    let uri = Uri::from_static("/v1/charges");
    let request = || {
        idem_runtime::__private::fingerprint_of_request(
            &Method::POST,
            &uri,
            Some(&form),
            body.as_bytes(),
        )
    };
    // The first on a thread grows its buffers.
    let first = request();
    let mut again = None;
    assert_eq!(allocations(|| again = Some(request())), 0);
    assert_eq!(again, Some(first));
}

#[test]
fn a_string_with_escapes_costs_its_decoding() {
    for (memo, escaped) in [(r#""x\"y""#, 1), (r#"["\u00e9", "\n", "\/"]"#, 3)] {
        let body = spaced_order(memo);
        Fingerprint::of_json(&body);
        // serde_json decodes each such string into a `String` of its own, through a buffer
        // of its own: two allocations.
        let n = allocations(|| _ = Fingerprint::of_json(&body));
        assert!(n <= 2 * escaped, "{memo}: {n} allocations");
    }
}

#[test]
fn the_counter_counts() {
    assert_eq!(allocations(|| drop(Vec::<u8>::with_capacity(10))), 1);
}
