//! The test service: annotated handlers, an engine per test, and request helpers.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::{FromRef, FromRequestParts, Path, Query, State};
use axum::http::{HeaderMap, Request, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use http_body_util::BodyExt;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Builder, Idempotency, idempotent};
use idem_tests::Gate;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Which store backs the engine under test.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    Memory,
    Sqlite,
    Postgres,
    /// A key prefix of its own on the shared server; its records expire within their TTL.
    Redis,
}

/// How many times the handlers ran.
#[derive(Clone, Default)]
pub(crate) struct Calls(Arc<AtomicUsize>);

impl Calls {
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
    fn bump(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[derive(Clone, FromRef)]
pub(crate) struct App {
    pub(crate) idem: Idempotency,
    pub(crate) calls: Calls,
    pub(crate) gate: Gate,
}

/// `{"status": 402}` picks the status; `{"panic": true}` panics. Answers with headers that test
/// ordering, cookies and hop-by-hop filtering.
#[idempotent(scope = "org")]
async fn charge(State(calls): State<Calls>, Json(body): Json<Value>) -> Response {
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
async fn pass_gate(calls: Calls, gate: Gate, body: Value) -> (StatusCode, Json<Value>) {
    let call = calls.bump();
    gate.pass().await;
    (
        StatusCode::CREATED,
        Json(json!({ "call": call, "echo": body })),
    )
}

#[idempotent(scope = "org")]
async fn gated(
    State(calls): State<Calls>,
    State(gate): State<Gate>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    pass_gate(calls, gate, body).await
}

#[idempotent(scope = "org", in_flight = "wait")]
async fn gated_wait(
    State(calls): State<Calls>,
    State(gate): State<Gate>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    pass_gate(calls, gate, body).await
}

#[idempotent(scope = "global", key = "required", ttl = "1h")]
async fn payout(State(calls): State<Calls>) -> (StatusCode, String) {
    (StatusCode::CREATED, format!("payout {}", calls.bump()))
}

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

#[idempotent(scope = "global")]
async fn form(
    State(calls): State<Calls>,
    Path(id): Path<u32>,
    Query(query): Query<HashMap<String, String>>,
    Org(org): Org,
    Form(form): Form<HashMap<String, String>>,
) -> String {
    format!("{} {id} {org} {query:?} {form:?}", calls.bump())
}

#[idempotent(scope = "global")]
async fn bytes(State(calls): State<Calls>, body: Bytes) -> String {
    format!("{} {}", calls.bump(), body.len())
}

#[idempotent(scope = "global")]
async fn text(State(calls): State<Calls>, body: String) -> String {
    format!("{} {body}", calls.bump())
}

#[idempotent(scope = "global")]
async fn large(State(calls): State<Calls>) -> Vec<u8> {
    calls.bump();
    vec![b'x'; 4096]
}

/// The same plain handler on two routes' worth of identity: a different endpoint than `text`.
#[idempotent(scope = "global")]
async fn text_twin(State(calls): State<Calls>, body: String) -> String {
    format!("{} {body}", calls.bump())
}

/// The org resolver every test engine registers: the `x-org` header.
pub(crate) fn org_of(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get("x-org")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

pub(crate) async fn builder(backend: Backend) -> Builder {
    let builder = Idempotency::builder().scope("org", org_of);
    match backend {
        Backend::Memory => builder.store(MemoryStore::new()),
        Backend::Sqlite => builder.store(idem_tests::sqlite_store().await),
        Backend::Postgres => builder.store(idem_tests::postgres_store().await),
        Backend::Redis => builder.store(idem_tests::redis_store().await),
    }
}

pub(crate) struct Harness {
    pub(crate) router: Router,
    pub(crate) app: App,
    pub(crate) clock: ManualClock,
}

/// A router over an engine built by `configure(builder(backend))`, on a manual clock.
pub(crate) async fn harness_with(
    backend: Backend,
    configure: impl FnOnce(Builder) -> Builder,
) -> Harness {
    let clock = ManualClock::new();
    let idem = configure(builder(backend).await.clock(clock.clone()))
        .build()
        .unwrap();
    let app = App {
        idem,
        calls: Calls::default(),
        gate: Gate::default(),
    };
    Harness {
        router: router(app.clone()),
        app,
        clock,
    }
}

/// Every test route over `app`.
pub(crate) fn router(app: App) -> Router {
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

pub(crate) async fn harness(backend: Backend) -> Harness {
    harness_with(backend, |b| b).await
}

/// A fully-read response.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|_| panic!("not JSON: {:?}", self.body))
    }
    pub(crate) fn code(&self) -> String {
        assert_eq!(
            self.headers["content-type"], "application/problem+json",
            "{self:?}"
        );
        self.json()["code"].as_str().unwrap().to_owned()
    }
    pub(crate) fn replayed(&self) -> bool {
        self.headers
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true")
    }
}

impl Harness {
    pub(crate) async fn send(&self, request: Request<Body>) -> Reply {
        send(&self.router, request).await
    }

    pub(crate) fn calls(&self) -> usize {
        self.app.calls.get()
    }
}

pub(crate) async fn send(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A JSON POST from org `acme` with an optional key.
pub(crate) fn post_json(uri: &str, key: Option<&str>, body: &str) -> Request<Body> {
    let mut builder = Request::post(uri)
        .header("content-type", "application/json")
        .header("x-org", "acme");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder.body(Body::from(body.to_owned())).unwrap()
}
