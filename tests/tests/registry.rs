//! The compile-time registry of endpoints and start-up validation of scopes.

use axum::http::StatusCode;
use idem_runtime::store::MemoryStore;
use idem_runtime::{BuildError, Idempotency, InFlightMode, KeyMode, idempotent};

/// Creates an order.
#[idempotent(scope = "tenant", ttl = "15m", key = "required", in_flight = "wait")]
pub async fn create_order() -> StatusCode {
    StatusCode::CREATED
}

/// Never routed: registered all the same.
#[idempotent(scope = "global")]
#[allow(dead_code)]
async fn ping() -> StatusCode {
    StatusCode::OK
}

#[test]
fn a_scope_without_a_resolver_fails_at_start_up() {
    let err = Idempotency::builder()
        .store(MemoryStore::new())
        .serves(create_order)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        BuildError::UnresolvedScope {
            endpoint: "registry::create_order",
            scope: "tenant"
        }
    );
    assert!(err.to_string().contains(".scope(\"tenant\""), "{err}");
}

#[test]
fn global_cannot_be_given_a_resolver() {
    let err = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("tenant", |_| None)
        .scope("global", |_| None)
        .build()
        .unwrap_err();
    assert_eq!(err, BuildError::ReservedScope);
}

#[test]
fn a_store_is_required() {
    let err = Idempotency::builder()
        .scope("tenant", |_| None)
        .build()
        .unwrap_err();
    assert_eq!(err, BuildError::MissingStore);
}

#[test]
fn the_engine_lists_every_annotated_endpoint() {
    let idem = Idempotency::builder()
        .store(MemoryStore::new())
        .scope("tenant", |_| None)
        .build()
        .unwrap();
    let mut endpoints: Vec<_> = idem.endpoints().collect();
    endpoints.sort_by_key(|e| e.handler());
    assert_eq!(endpoints.len(), 2);
    let order = endpoints[0];
    assert_eq!(order.handler(), "registry::create_order");
    assert_eq!(order.scope(), "tenant");
    assert_eq!(order.ttl().as_secs(), 15 * 60);
    assert_eq!(order.key_mode(), KeyMode::Required);
    assert_eq!(order.in_flight(), InFlightMode::Wait);
    let global = endpoints[1];
    assert_eq!(global.handler(), "registry::ping");
    assert_eq!(global.scope(), "global");
    assert_eq!(global.ttl().as_secs(), 24 * 60 * 60);
    assert_eq!(global.key_mode(), KeyMode::Optional);
    assert_eq!(global.in_flight(), InFlightMode::Reject);
}

#[tokio::test]
async fn an_endpoint_not_served_answers_500_for_a_scope_without_resolver() {
    use axum::{Router, body::Body, http::Request, routing::post};
    use tower::ServiceExt;

    let idem = Idempotency::builder().store(MemoryStore::new()).build();
    let app = Router::new()
        .route("/orders", post(create_order))
        .with_state(idem.unwrap());
    let request = Request::post("/orders")
        .header("idempotency-key", "k")
        .body(Body::empty());
    let response = app.oneshot(request.unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "idempotency_scope_unknown");
}
