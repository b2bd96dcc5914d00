//! The test service's handlers, once as plain axum handlers (served under `IdempotencyLayer`)
//! and once annotated with `#[idempotent]` (each wrapping its plain twin), with the routes of
//! each face. The layer's settings mirror the attributes', so every case means the same on
//! both faces.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::{StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use idem_runtime::{IdempotencyLayer, InFlightMode, KeyMode};
use idem_tests::Gate;
use serde_json::{Value, json};

use crate::support::{App, Calls};

/// A custom extractor: the caller's org from `x-org`, rejecting with 401 when absent.
pub(crate) struct Org(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Org {
    type Rejection = (StatusCode, &'static str);

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .headers
            .get("x-org")
            .and_then(|v| v.to_str().ok())
            .map(|org| Org(org.to_owned()))
            .ok_or((StatusCode::UNAUTHORIZED, "no org"))
    }
}

pub(crate) mod plain {
    use super::*;

    /// `{"status": 402}` picks the status; `{"panic": true}` panics. Answers with headers that
    /// test ordering, cookies and hop-by-hop filtering.
    pub(crate) async fn charge(State(calls): State<Calls>, Json(body): Json<Value>) -> Response {
        let call = calls.bump();
        if body["panic"] == true {
            panic!("handler panicked on purpose");
        }
        let status = body["status"]
            .as_u64()
            .and_then(|s| StatusCode::from_u16(s as u16).ok());
        let mut response = (
            status.unwrap_or(StatusCode::CREATED),
            Json(json!({ "call": call, "echo": body })),
        )
            .into_response();
        let headers = response.headers_mut();
        headers.append("x-multi", "first".parse().unwrap());
        headers.append("x-call", call.to_string().parse().unwrap());
        headers.append("x-multi", "second".parse().unwrap());
        headers.append("set-cookie", "session=secret".parse().unwrap());
        headers.append("connection", "x-hop".parse().unwrap());
        headers.append("x-hop", "1".parse().unwrap());
        response
    }

    /// Counts the call, waits at the gate, answers 201 with the call number.
    pub(crate) async fn gated(
        State(calls): State<Calls>,
        State(gate): State<Gate>,
        Json(body): Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        let call = calls.bump();
        gate.pass().await;
        (
            StatusCode::CREATED,
            Json(json!({ "call": call, "echo": body })),
        )
    }

    pub(crate) async fn payout(State(calls): State<Calls>) -> (StatusCode, String) {
        (StatusCode::CREATED, format!("payout {}", calls.bump()))
    }

    pub(crate) async fn form(
        State(calls): State<Calls>,
        Path(id): Path<u32>,
        Query(query): Query<HashMap<String, String>>,
        Org(org): Org,
        Form(form): Form<HashMap<String, String>>,
    ) -> String {
        format!("{} {id} {org} {query:?} {form:?}", calls.bump())
    }

    pub(crate) async fn bytes(State(calls): State<Calls>, body: Bytes) -> String {
        format!("{} {}", calls.bump(), body.len())
    }

    pub(crate) async fn text(State(calls): State<Calls>, body: String) -> String {
        format!("{} {body}", calls.bump())
    }

    pub(crate) async fn large(State(calls): State<Calls>) -> Vec<u8> {
        calls.bump();
        vec![b'x'; 4096]
    }
}

/// The same handlers under `#[idempotent]`.
pub(crate) mod annotated {
    use super::*;
    use idem_runtime::idempotent;

    #[idempotent(scope = "org")]
    pub(crate) async fn charge(calls: State<Calls>, body: Json<Value>) -> Response {
        plain::charge(calls, body).await
    }

    #[idempotent(scope = "org")]
    pub(crate) async fn gated(
        calls: State<Calls>,
        gate: State<Gate>,
        body: Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        plain::gated(calls, gate, body).await
    }

    #[idempotent(scope = "org", in_flight = "wait")]
    pub(crate) async fn gated_wait(
        calls: State<Calls>,
        gate: State<Gate>,
        body: Json<Value>,
    ) -> (StatusCode, Json<Value>) {
        plain::gated(calls, gate, body).await
    }

    #[idempotent(scope = "global", key = "required", ttl = "1h")]
    pub(crate) async fn payout(calls: State<Calls>) -> (StatusCode, String) {
        plain::payout(calls).await
    }

    #[idempotent(scope = "global")]
    pub(crate) async fn form(
        calls: State<Calls>,
        id: Path<u32>,
        query: Query<HashMap<String, String>>,
        org: Org,
        form: Form<HashMap<String, String>>,
    ) -> String {
        plain::form(calls, id, query, org, form).await
    }

    #[idempotent(scope = "global")]
    pub(crate) async fn bytes(calls: State<Calls>, body: Bytes) -> String {
        plain::bytes(calls, body).await
    }

    #[idempotent(scope = "global")]
    pub(crate) async fn text(calls: State<Calls>, body: String) -> String {
        plain::text(calls, body).await
    }

    /// The same handler as `text` under another endpoint identity.
    #[idempotent(scope = "global")]
    pub(crate) async fn text_twin(calls: State<Calls>, body: String) -> String {
        plain::text(calls, body).await
    }

    #[idempotent(scope = "global")]
    pub(crate) async fn large(calls: State<Calls>) -> Vec<u8> {
        plain::large(calls).await
    }
}

/// Every test route, each handler under `#[idempotent]`.
pub(crate) fn attribute_routes(app: App) -> Router {
    use annotated::*;
    Router::new()
        .route("/charges", post(charge).get(charge).options(charge))
        .route("/gated", post(gated))
        .route("/gated-wait", post(gated_wait))
        .route("/payouts", post(payout))
        .route("/forms/{id}", post(form))
        .route("/bytes", post(bytes))
        .route("/text", post(text))
        .route("/text-twin", post(text_twin))
        .route("/large", post(large))
        .route("/plain", get(|| async { "plain" }))
        .with_state(app)
}

/// Every test route with plain handlers, under one layer whose settings per route are the
/// attributes'.
pub(crate) fn layer_routes(app: App) -> Router {
    use plain::*;
    let layer = IdempotencyLayer::new(&app.idem)
        .scope("org")
        .route("/gated-wait", |r| r.in_flight(InFlightMode::Wait))
        .route("/payouts", |r| {
            r.scope("global")
                .key(KeyMode::Required)
                .ttl(Duration::from_secs(60 * 60))
        });
    let layer = ["/forms/{id}", "/bytes", "/text", "/text-twin", "/large"]
        .into_iter()
        .fold(layer, |layer, path| {
            layer.route(path, |r| r.scope("global"))
        });
    Router::new()
        .route("/charges", post(charge).get(charge).options(charge))
        .route("/gated", post(gated))
        .route("/gated-wait", post(gated))
        .route("/payouts", post(payout))
        .route("/forms/{id}", post(form))
        .route("/bytes", post(bytes))
        .route("/text", post(text))
        .route("/text-twin", post(text))
        .route("/large", post(large))
        .route("/plain", get(|| async { "plain" }))
        .layer(layer)
        .with_state(app)
}
