//! The tower layer: every mutating route of a router made idempotent at once, via the HTTP flow.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use tower::Layer;

use crate::http::release::ClientErrors;
use idem_core::endpoint::KeyMode;
use idem_core::engine::InFlightMode;
use idem_core::idempotency::Idempotency;
use idem_core::rules::checked_ttl;
use idem_core::settings::scope::GLOBAL_SCOPE;

mod route;
mod service;

pub use route::RouteSettings;
use route::{Config, Settings, check_path, client_errors};
pub use service::IdempotencyService;

/// Makes every `POST`, `PUT` and `PATCH` route of an axum router idempotent, with one scope and
/// TTL for all of them and overrides per route: the same flow, answers, metrics and atomic mode
/// as `#[idempotent]`, without annotating each handler.
///
/// ```
/// use std::time::Duration;
///
/// use axum::extract::Request;
/// use axum::middleware::{self, Next};
/// use axum::response::Response;
/// use axum::routing::post;
/// use axum::{Json, Router, http::StatusCode};
/// use idem_runtime::{Idempotency, IdempotencyLayer, store::MemoryStore};
/// use serde_json::Value;
///
/// #[derive(Clone)]
/// struct User(String);
///
/// async fn create_story(Json(story): Json<Value>) -> (StatusCode, Json<Value>) {
///     (StatusCode::CREATED, Json(story)) // runs at most once per key and user
/// }
///
/// /// Whose keys these are: the idempotency layer's scope resolver reads this extension.
/// async fn authenticate(mut request: Request, next: Next) -> Response {
///     request.extensions_mut().insert(User("ada".into()));
///     next.run(request).await
/// }
///
/// # fn main() -> Result<(), idem_runtime::BuildError> {
/// let idempotency = Idempotency::builder()
///     .store(MemoryStore::new())
///     .scope("user", |caller| caller.extension::<User>().map(|u| u.0.clone()))
///     .build()?;
///
/// let api = Router::new()
///     .route("/stories", post(create_story))
///     .route("/dwellers/{id}/heartbeat", post(|| async { "beat" }))
///     .layer(
///         IdempotencyLayer::new(&idempotency)
///             .scope("user") // keys per user, replayed for 24 hours (the default TTL)
///             .route("/api/dwellers/{id}/heartbeat", |route| route.ttl(Duration::from_secs(60))),
///     )
///     // Outer layers run first: authenticate before the idempotency layer resolves the scope.
///     .layer(middleware::from_fn(authenticate));
/// let app: Router = Router::new().nest("/api", api);
/// # Ok(()) }
/// ```
///
/// # What it covers
///
/// Apply it with [`Router::layer`](axum::Router::layer) (or `route_layer`): it then runs after
/// routing and names each route's operation `"{METHOD} {path}"` after the route's pattern
/// (`POST /api/dwellers/{id}/act`, as [`MatchedPath`](axum::extract::MatchedPath) reports it, with the prefixes of `nest`),
/// which isolates its records and labels its metrics. Requests of the covered methods
/// ([`methods`](Self::methods)) on matched routes not [skipped](Self::skip) go through the
/// engine exactly as under the attribute: key validation, scope, fingerprint, claim, replay,
/// `409`, `422`, fail-closed `503`, storing 2xx-4xx and releasing 5xx. Other requests, and
/// requests no route matched (the fallback), reach the inner service untouched.
///
/// # How it differs from the attribute
///
/// - **Scope resolvers run before the handler's extractors**, so the principal must already be
///   in the request: authenticate in a middleware applied outside this layer (after it, in
///   builder order), or resolve the scope from the headers.
/// - **It cannot tell an extractor's rejection from the handler's answer.** The responses with
///   the statuses of [`rejections`](Self::rejections) (by default those of axum's extractors,
///   authentication and the router: 400, 401, 403, 405, 413, 415, 422) are treated as requests
///   that never started: not stored, the key released (counted `released`), and in atomic mode
///   the handler's writes rolled back, so the client can fix the request and retry with the same
///   key. Every other 2xx, 3xx and 4xx is stored.
/// - **[`Builder::build`](idem_core::idempotency::Builder::build) does not check layer routes**: a scope is
///   checked when it is given to the layer (which panics when the engine has no resolver for
///   it), and a handler taking a `Tx` for another database than the store's answers
///   `500 idempotency_misconfigured`.
/// - It buffers at most [`max_request_bytes`](Self::max_request_bytes) of a body to fingerprint
///   it, refusing a larger one with `413 payload_too_large`: at once when `Content-Length` says
///   so, before reading any of it. axum's `DefaultBodyLimit` applies as well; the smaller wins.
///   Responses over the engine's [`max_response_bytes`](idem_core::idempotency::Builder::max_response_bytes) are
///   sent in full to the first client and answered `409 idempotency_response_too_large` to its
///   retries, as under the attribute.
///
/// An `#[idempotent]` handler under the layer, on a covered route, runs as
/// a plain handler: the layer's settings apply and the request claims one record, not two. On
/// a route or method the layer does not cover, the attribute works on its own.
///
/// A handler under the layer that takes a `Tx` (or `AnyTx`) runs in atomic mode, as under the
/// attribute: its writes commit together with the stored response.
#[derive(Debug, Clone)]
#[must_use]
pub struct IdempotencyLayer {
    idempotency: Idempotency,
    config: Arc<Config>,
}

impl IdempotencyLayer {
    /// A layer on `idempotency` with the defaults: methods `POST`, `PUT` and `PATCH`, scope
    /// `"global"`, TTL 24 h, key optional, in-flight duplicates rejected with 409, bodies up to
    /// the engine's [`max_request_bytes`](idem_core::idempotency::Builder::max_request_bytes), rejections 400,
    /// 401, 403, 405, 413, 415 and 422. Takes the engine or a reference to it.
    pub fn new(idempotency: impl AsRef<Idempotency>) -> Self {
        let idempotency = idempotency.as_ref().clone();
        let mut rejections = ClientErrors::NONE;
        for status in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::METHOD_NOT_ALLOWED,
            StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            StatusCode::UNPROCESSABLE_ENTITY,
        ] {
            rejections.insert(status);
        }
        Self {
            idempotency,
            config: Arc::new(Config {
                defaults: Settings {
                    name: None,
                    scope: GLOBAL_SCOPE,
                    ttl: idem_rules::ttl::DEFAULT_TTL,
                    key: KeyMode::Optional,
                    in_flight: InFlightMode::Reject,
                    rejections,
                },
                methods: vec![Method::POST, Method::PUT, Method::PATCH],
                routes: HashMap::new(),
                skipped: HashSet::new(),
                max_request_bytes: None,
            }),
        }
    }

    fn config(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Whose keys these are (default `"global"`): a scope registered with
    /// [`Builder::scope`](idem_core::idempotency::Builder::scope), whose resolver finds the principal of each
    /// request (`401 idempotency_scope_unresolved` when it finds none).
    ///
    /// # Panics
    /// When the engine has no resolver for `scope`.
    #[track_caller]
    pub fn scope(mut self, scope: &'static str) -> Self {
        self.check_scope("IdempotencyLayer::scope", scope);
        self.config().defaults.scope = scope;
        self
    }

    /// How long a completed response is replayed (default 24 h).
    ///
    /// # Panics
    /// When `ttl` is not within 1 s ..= 30 days, the attribute's range.
    #[track_caller]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config().defaults.ttl = checked_ttl("IdempotencyLayer::ttl", ttl);
        self
    }

    /// What to do with a request that carries no key (default [`KeyMode::Optional`]: run it
    /// without idempotency).
    pub fn key(mut self, key: KeyMode) -> Self {
        self.config().defaults.key = key;
        self
    }

    /// What to do with a duplicate that arrives while the first request runs (default
    /// [`InFlightMode::Reject`]: 409 with `Retry-After`).
    pub fn in_flight(mut self, in_flight: InFlightMode) -> Self {
        self.config().defaults.in_flight = in_flight;
        self
    }

    /// The client-error statuses that are not stored but release the key, because they mean
    /// the request was refused before the handler ran: an extractor's rejection, the
    /// authentication's answer, the router's 405. Replaces the default set (400, 401, 403, 405,
    /// 413, 415, 422); pass none to store every 4xx.
    ///
    /// # Panics
    /// When a status is not a 4xx (2xx and 3xx are always stored, 5xx always released).
    #[track_caller]
    pub fn rejections(mut self, statuses: impl IntoIterator<Item = StatusCode>) -> Self {
        self.config().defaults.rejections = client_errors(statuses);
        self
    }

    /// The methods the layer covers (default `POST`, `PUT`, `PATCH`); requests with other
    /// methods reach the inner service untouched. Add `DELETE` if yours need keys.
    ///
    /// # Panics
    /// When `methods` holds `GET`, `HEAD` or `OPTIONS`: safe methods never touch the store.
    #[track_caller]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods: Vec<Method> = methods.into_iter().collect();
        if let Some(safe) = methods
            .iter()
            .find(|m| matches!(**m, Method::GET | Method::HEAD | Method::OPTIONS))
        {
            panic!(
                "IdempotencyLayer::methods: {safe} is a safe method and is never made \
                 idempotent; cover only methods that change something (POST, PUT, PATCH, DELETE)"
            );
        }
        self.config().methods = methods;
        self
    }

    /// Overrides settings for the route whose pattern is `path` (as written in
    /// `Router::route`, with the prefixes of `nest`: `"/api/stories"`); what the override leaves
    /// alone follows the layer's settings. Calling it again for the same path amends the
    /// override.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use idem_runtime::{Idempotency, IdempotencyLayer, KeyMode, store::MemoryStore};
    /// # let idempotency = Idempotency::builder().store(MemoryStore::new()).build().unwrap();
    /// let layer = IdempotencyLayer::new(&idempotency)
    ///     .route("/v1/payouts", |route| route.key(KeyMode::Required).ttl(Duration::from_secs(7 * 86_400)));
    /// ```
    ///
    /// # Panics
    /// When `path` does not start with `/`, or the override names a scope the engine has no
    /// resolver for.
    #[track_caller]
    pub fn route(
        mut self,
        path: &str,
        configure: impl FnOnce(RouteSettings) -> RouteSettings,
    ) -> Self {
        check_path("route", path);
        let current = self.config.routes.get(path).cloned().unwrap_or_default();
        let route = configure(current);
        if let Some(scope) = route.scope {
            self.check_scope("IdempotencyLayer::route", scope);
        }
        self.config().routes.insert(path.to_owned(), route);
        self
    }

    /// Leaves the route whose pattern is `path` alone: its requests reach the inner service
    /// untouched (an `#[idempotent]` handler there works on its own). Wins over
    /// [`route`](Self::route).
    ///
    /// # Panics
    /// When `path` does not start with `/`.
    #[track_caller]
    pub fn skip(mut self, path: &str) -> Self {
        check_path("skip", path);
        self.config().skipped.insert(path.to_owned());
        self
    }

    /// The largest request body the layer reads to fingerprint a request (default: the
    /// engine's [`max_request_bytes`](idem_core::idempotency::Builder::max_request_bytes), 2 MiB unless set); a
    /// larger one is answered `413 payload_too_large` and runs nothing. A request whose
    /// `Content-Length` is larger is refused before any of its body is read.
    pub fn max_request_bytes(mut self, limit: usize) -> Self {
        self.config().max_request_bytes = Some(limit);
        self
    }

    /// Panics unless the engine can resolve `scope`, as [`Builder::build`](idem_core::idempotency::Builder::build)
    /// fails for an `#[idempotent]` handler's scope, with the same message.
    #[track_caller]
    fn check_scope(&self, setter: &str, scope: &'static str) {
        if let Err(error) = self.idempotency.scopes().check(scope) {
            panic!("{setter}: {error}");
        }
    }
}

/// What the OpenAPI document needs to know of a layer (feature `utoipa`).
#[cfg(feature = "utoipa")]
impl IdempotencyLayer {
    /// The handle the layer runs on.
    pub(crate) fn idempotency(&self) -> &Idempotency {
        &self.idempotency
    }

    /// The key mode of `method` on the route documented as `template` (OpenAPI's path
    /// template, `/files/{rest}` for axum's `/files/{*rest}`), or `None` when the layer leaves
    /// that operation alone: a method it does not cover, or a skipped route. Overrides and
    /// skips are found by their pattern as written, whose wildcard differs from the template's.
    pub(crate) fn documented_key(&self, method: &Method, template: &str) -> Option<KeyMode> {
        let Config {
            skipped, routes, ..
        } = &*self.config;
        let pattern = (skipped.iter().chain(routes.keys()))
            .find(|pattern| pattern.replace("{*", "{") == template)
            .map_or(template, String::as_str);
        Some(self.config.settings(method, pattern)?.key)
    }
}

impl<S> Layer<S> for IdempotencyLayer {
    type Service = IdempotencyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdempotencyService {
            inner,
            idempotency: self.idempotency.clone(),
            config: self.config.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
