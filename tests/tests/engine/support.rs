//! The test service: an engine per test on the case's store, the routes of the case's face,
//! and request helpers.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::FromRef;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Builder, Caller, Idempotency};
pub(crate) use idem_tests::Calls;
use idem_tests::Gate;
use serde_json::Value;
use tower::ServiceExt;

use crate::handlers;

/// Which store backs the engine under test.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Store {
    Memory,
    Sqlite,
    Postgres,
    /// A database of its own on the MySQL/MariaDB server.
    MySql,
    /// A key prefix of its own on the shared server; its records expire within their TTL.
    Redis,
}

/// Which face makes the routes idempotent: `#[idempotent]` on each handler, or one
/// `IdempotencyLayer` over plain handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Face {
    Attribute,
    Layer,
}

/// What a case runs on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Setup {
    pub(crate) face: Face,
    pub(crate) store: Store,
}

#[derive(Clone, FromRef)]
pub(crate) struct App {
    pub(crate) idem: Idempotency,
    pub(crate) calls: Calls,
    pub(crate) gate: Gate,
}

/// The org resolver every test engine registers: the `x-org` header.
pub(crate) fn org_of(caller: &Caller<'_>) -> Option<String> {
    caller.metadata("x-org").map(str::to_owned)
}

pub(crate) async fn builder(store: Store) -> Builder {
    let builder = Idempotency::builder().scope("org", org_of);
    match store {
        Store::Memory => builder.store(MemoryStore::new()),
        Store::Sqlite => builder.store(idem_tests::sqlite_store().await),
        Store::Postgres => builder.store(idem_tests::postgres_store().await),
        Store::MySql => builder.store(idem_tests::mysql_store().await),
        Store::Redis => builder.store(idem_tests::redis_store().await),
    }
}

pub(crate) struct Harness {
    pub(crate) router: Router,
    pub(crate) app: App,
    pub(crate) clock: ManualClock,
}

/// A router over an engine built by `configure(builder(setup.store))`, on a manual clock.
pub(crate) async fn harness_with(
    setup: Setup,
    configure: impl FnOnce(Builder) -> Builder,
) -> Harness {
    let clock = ManualClock::new();
    let idem = configure(builder(setup.store).await.clock(clock.clone()))
        .build()
        .unwrap();
    let app = App {
        idem,
        calls: Calls::default(),
        gate: Gate::default(),
    };
    Harness {
        router: router(app.clone(), setup.face),
        app,
        clock,
    }
}

/// Every test route over `app`, made idempotent by `face`.
pub(crate) fn router(app: App, face: Face) -> Router {
    match face {
        Face::Attribute => handlers::attribute_routes(app),
        Face::Layer => handlers::layer_routes(app),
    }
}

pub(crate) async fn harness(setup: Setup) -> Harness {
    harness_with(setup, |b| b).await
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
