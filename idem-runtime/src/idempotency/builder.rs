//! The engine handle users hold: the transport-neutral engine plus the settings of the HTTP
//! faces (key header, scopes, limits), configured once with [`Builder`].

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use http::request::Parts;

use crate::core::clock::{Clock, SystemClock};
use crate::core::error::StoreError;
use crate::engine::{Engine, Policy, Timed};
use crate::face::endpoint::{self, Endpoint, GLOBAL_SCOPE};
use crate::http::rejection::Rejection;
use crate::store::{Capabilities, DynStore, Store};
use axum::response::{IntoResponse, Response};

type Resolver = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
type Renderer = Arc<dyn Fn(&Rejection) -> Response + Send + Sync>;

/// The idempotency engine: a store plus the policy every `#[idempotent]` handler follows.
///
/// Cheap to clone (one `Arc`). Handlers get it from the router's state, so the state must provide
/// it: either the state *is* an `Idempotency`, or `Idempotency: FromRef<YourState>` (derive
/// `FromRef` on your state struct, or implement it). A router without one does not compile.
///
/// ```standalone_crate
/// use axum::{Router, routing::post, extract::FromRef};
/// use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
///
/// #[derive(Clone, FromRef)]
/// struct AppState {
///     idempotency: Idempotency,
/// }
///
/// #[idempotent(scope = "user")]
/// async fn create_order() -> &'static str {
///     "created"
/// }
///
/// # fn main() -> Result<(), idem_runtime::BuildError> {
/// let idempotency = Idempotency::builder()
///     .store(MemoryStore::new())
///     // Whose keys these are: here, the user id an auth layer put in the request extensions.
///     .scope("user", |parts| parts.extensions.get::<UserId>().map(|u| u.0.clone()))
///     .build()?;
///
/// let app: Router = Router::new()
///     .route("/orders", post(create_order))
///     .with_state(AppState { idempotency });
/// # Ok(()) }
/// # #[derive(Clone)] struct UserId(String);
/// ```
#[derive(Clone)]
pub struct Idempotency {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    scopes: HashMap<String, Resolver>,
    http: HttpPolicy,
    render: Option<Renderer>,
}

/// What the HTTP faces add to the engine's policy.
#[derive(Debug, Clone)]
pub(crate) struct HttpPolicy {
    pub(crate) header: HeaderName,
    pub(crate) max_response_bytes: usize,
    pub(crate) max_request_bytes: usize,
}

impl Idempotency {
    /// Starts configuring an engine.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Every `#[idempotent]` endpoint linked into this binary (registered at compile time).
    pub fn endpoints(&self) -> impl Iterator<Item = &'static Endpoint> {
        endpoint::registered()
    }

    /// The header the engine reads keys from.
    pub fn header_name(&self) -> &HeaderName {
        &self.inner.http.header
    }

    /// Deletes up to `limit` expired records now; returns how many. The sweeper calls this.
    pub async fn purge_expired(&self, limit: u32) -> Result<u64, StoreError> {
        self.inner.engine.purge_expired(limit).await
    }

    /// Spawns a task on the current Tokio runtime that purges expired records every `period`,
    /// in batches of at most `batch` records so no purge holds a store lock for long. Abort the
    /// returned handle to stop it.
    ///
    /// Stores whose backend expires records itself (Redis) need no sweeping: the task then
    /// logs that once and ends.
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn spawn_sweeper(&self, period: Duration, batch: u32) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            if !engine.inner.engine.store.needs_sweeping() {
                tracing::info!(
                    store = engine.inner.engine.store_name,
                    "the idempotency store expires records itself; no sweeper needed"
                );
                return;
            }
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                loop {
                    match engine.purge_expired(batch).await {
                        Ok(n) if n >= u64::from(batch) => tokio::task::yield_now().await,
                        Ok(n) => {
                            tracing::debug!(purged = n, "idempotency sweep");
                            break;
                        }
                        Err(error) => {
                            tracing::warn!(
                                error = &error as &dyn std::error::Error,
                                "idempotency sweep failed"
                            );
                            break;
                        }
                    }
                }
            }
        })
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub(crate) fn http(&self) -> &HttpPolicy {
        &self.inner.http
    }

    /// The engine's own answer: problem+json, or the application's format
    /// ([`Builder::render_rejections`]) with the rejection's status and `Retry-After` kept.
    pub fn reject(&self, rejection: Rejection) -> Response {
        let Some(render) = &self.inner.render else {
            return rejection.into_response();
        };
        let mut response = render(&rejection);
        *response.status_mut() = rejection.status();
        if let Some(value) = rejection.retry_after_header() {
            response
                .headers_mut()
                .insert(http::header::RETRY_AFTER, value);
        }
        response
    }

    /// Whether requests can be scoped by `scope`: `"global"`, or a scope with a resolver.
    pub(crate) fn has_scope(&self, scope: &str) -> bool {
        scope == GLOBAL_SCOPE || self.inner.scopes.contains_key(scope)
    }

    /// The principal for `scope`: `Ok(None)` when the request has none, `Err(())` when the
    /// scope has no resolver at all (only possible for endpoints the start-up checks skipped).
    pub(crate) fn resolve_scope(&self, scope: &str, parts: &Parts) -> Result<Option<String>, ()> {
        if scope == GLOBAL_SCOPE {
            return Ok(Some(String::new()));
        }
        let resolve = self.inner.scopes.get(scope).ok_or(())?;
        Ok(resolve(parts))
    }
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut scopes: Vec<_> = self.inner.scopes.keys().collect();
        scopes.sort();
        f.debug_struct("Idempotency")
            .field("store", &self.inner.engine.store_name)
            .field("capabilities", &self.inner.engine.capabilities)
            .field("scopes", &scopes)
            .field("policy", &self.inner.engine.policy)
            .field("http", &self.inner.http)
            .finish_non_exhaustive()
    }
}

/// Configures an [`Idempotency`] engine. Every setting but the store has a production default.
#[must_use]
pub struct Builder {
    store: Option<(Arc<dyn DynStore>, &'static str, Capabilities)>,
    render: Option<Renderer>,
    scopes: HashMap<String, Resolver>,
    reserved_scope: bool,
    checks: Checks,
    policy: Policy,
    http: HttpPolicy,
    clock: Arc<dyn Clock>,
}

/// Which `#[idempotent]` endpoints [`Builder::build`] checks.
enum Checks {
    All,
    Under(Vec<String>),
    None,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            store: None,
            render: None,
            scopes: HashMap::new(),
            reserved_scope: false,
            checks: Checks::All,
            policy: Policy {
                lease: Duration::from_secs(30),
                wait_timeout: Duration::from_secs(10),
                retry_after: Duration::from_secs(1),
                store_timeout: Duration::from_secs(5),
            },
            http: HttpPolicy {
                header: HeaderName::from_static("idempotency-key"),
                max_response_bytes: 2 * 1024 * 1024,
                max_request_bytes: 2 * 1024 * 1024,
            },
            clock: Arc::new(SystemClock),
        }
    }
}

impl Builder {
    /// Where records live. Required.
    pub fn store<S: Store>(mut self, store: S) -> Self {
        let store = Arc::new(store);
        let mut capabilities = Capabilities::default();
        store.offer_capabilities(&mut capabilities);
        self.store = Some((store, std::any::type_name::<S>(), capabilities));
        self
    }

    /// Registers how to find the principal of scope `name` (the tenant whose keys these are) in
    /// a request, typically from an extension your auth layer or extractor inserted. A request for
    /// which `resolve` returns `None` is answered `401 idempotency_scope_unresolved`.
    ///
    /// Resolvers run after the handler's `FromRequestParts` extractors, so an extractor that
    /// authenticates the request may insert the extension the resolver reads.
    pub fn scope<F>(mut self, name: impl Into<String>, resolve: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        let name = name.into();
        if name == GLOBAL_SCOPE {
            self.reserved_scope = true;
        }
        self.scopes.insert(name, Arc::new(resolve));
        self
    }

    /// The request header carrying the key. Default `Idempotency-Key`; some clients send
    /// `X-Idempotency-Key`.
    pub fn header_name(mut self, name: HeaderName) -> Self {
        self.http.header = name;
        self
    }

    /// How long an owner's claim lasts without renewal (default 30 s). A running handler renews
    /// its lease every third of this; a crashed one's record can be taken over once it lapses.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.policy.lease = lease.max(Duration::from_millis(100));
        self
    }

    /// How long an `in_flight = "wait"` duplicate waits for the first request before answering
    /// 409 (default 10 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.policy.wait_timeout = timeout;
        self
    }

    /// The largest response body kept for replay (default 2 MiB). A larger response is still sent
    /// to the first client in full; its retries get `409 idempotency_response_too_large` naming
    /// the original status. The operation is never run again for that key.
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.http.max_response_bytes = limit;
        self
    }

    /// The largest request body an idempotent request may have (default 2 MiB, as axum's
    /// `DefaultBodyLimit`; both limits apply). A request whose `Content-Length` says more is
    /// answered `413 payload_too_large` before any of its body is read.
    pub fn max_request_bytes(mut self, limit: usize) -> Self {
        self.http.max_request_bytes = limit;
        self
    }

    /// How long any one call to the store may take (default 5 s). Past it the request fails
    /// closed: `503 idempotency_store_unavailable` with `Retry-After`, the handler not run. A
    /// completion or release that times out is retried in the background.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.policy.store_timeout = timeout.max(Duration::from_millis(10));
        self
    }

    /// Renders the engine's own answers (400 invalid key, 409 in flight, 422 reused, 503
    /// unavailable, ...) in the application's error format instead of problem+json. The engine
    /// keeps each answer's status and `Retry-After`, whatever `render` sets; match on the
    /// [`Rejection`] (its [`code`](Rejection::code) is stable) to choose the body.
    ///
    /// ```
    /// use axum::{Json, response::IntoResponse};
    /// use idem_runtime::{Idempotency, Rejection, store::MemoryStore};
    ///
    /// let engine = Idempotency::builder()
    ///     .store(MemoryStore::new())
    ///     .render_rejections(|rejection: &Rejection| {
    ///         let kind = match rejection {
    ///             Rejection::KeyReused | Rejection::InProgress { .. } => "idempotency_error",
    ///             _ => "api_error",
    ///         };
    ///         Json(serde_json::json!({
    ///             "error": { "type": kind, "code": rejection.code(), "message": rejection.to_string() }
    ///         }))
    ///         .into_response()
    ///     })
    ///     .build()
    ///     .unwrap();
    /// # let _ = engine;
    /// ```
    pub fn render_rejections<F>(mut self, render: F) -> Self
    where
        F: Fn(&Rejection) -> Response + Send + Sync + 'static,
    {
        self.render = Some(Arc::new(render));
        self
    }

    /// `Retry-After` sent with 409 and 503 answers (default 1 s).
    pub fn retry_after(mut self, after: Duration) -> Self {
        self.policy.retry_after = after;
        self
    }

    /// The clock used for leases and expiry. Tests use [`ManualClock`](crate::clock::ManualClock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Limits the start-up checks of [`Builder::build`] to the `#[idempotent]` endpoints whose
    /// module path starts with `module` (such as `"my_app::admin"`); call it again to add
    /// another. For binaries with several engines (different stores or scope sets), each serving
    /// the handlers of its own modules: each engine checks its own endpoints only.
    pub fn endpoints_under(mut self, module: impl Into<String>) -> Self {
        let module = module.into();
        match &mut self.checks {
            Checks::Under(modules) => modules.push(module),
            checks => *checks = Checks::Under(vec![module]),
        }
        self
    }

    /// Skips the start-up checks of [`Builder::build`] altogether. For binaries holding
    /// applications whose endpoints no module path separates (merged doctests). A request to
    /// an endpoint whose scope has no resolver is then answered `500 idempotency_scope_unknown`,
    /// and one in atomic mode on a store without transactions `500 idempotency_misconfigured`.
    pub fn skip_endpoint_checks(mut self) -> Self {
        self.checks = Checks::None;
        self
    }

    /// Builds the engine, checking that every `#[idempotent]` endpoint in the binary (or under
    /// the modules of [`Builder::endpoints_under`]) names a scope that has a resolver, and that
    /// every endpoint in atomic mode can get a transaction from the store.
    pub fn build(self) -> Result<Idempotency, BuildError> {
        if self.reserved_scope {
            return Err(BuildError::ReservedScope);
        }
        let (store, store_name, capabilities) = self.store.ok_or(BuildError::MissingStore)?;
        let checked = endpoint::registered().filter(|ep| match &self.checks {
            Checks::All => true,
            Checks::Under(modules) => modules.iter().any(|m| in_module(ep.name(), m)),
            Checks::None => false,
        });
        for ep in checked {
            if ep.scope() != GLOBAL_SCOPE && !self.scopes.contains_key(ep.scope()) {
                return Err(BuildError::UnresolvedScope {
                    endpoint: ep.name(),
                    scope: ep.scope(),
                });
            }
            if let Some(need) = ep.atomic().filter(|need| !need.is_met(&capabilities)) {
                return Err(BuildError::AtomicUnsupported {
                    endpoint: ep.name(),
                    database: need.database(),
                    store: store_name,
                });
            }
        }
        Ok(Idempotency {
            inner: Arc::new(Inner {
                engine: Engine {
                    store: Arc::new(Timed::new(store, self.policy.store_timeout)),
                    store_name,
                    capabilities,
                    clock: self.clock,
                    policy: self.policy,
                },
                scopes: self.scopes,
                http: self.http,
                render: self.render,
            }),
        })
    }
}

/// Whether `path` (`a::b::f`) is `module` or inside it.
fn in_module(path: &str, module: &str) -> bool {
    path.strip_prefix(module)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("policy", &self.policy)
            .field("http", &self.http)
            .finish_non_exhaustive()
    }
}

/// A misconfigured [`Idempotency`] engine, reported by [`Builder::build`] at start-up rather
/// than by the first request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No store was given to the builder.
    #[error("no idempotency store configured: call `.store(..)` on the builder")]
    MissingStore,
    /// An annotated endpoint names a scope that has no resolver.
    #[error(
        "endpoint `{endpoint}` uses scope \"{scope}\", which has no resolver: \
         call `.scope(\"{scope}\", |parts| ..)` on the builder"
    )]
    UnresolvedScope {
        /// The endpoint (module path and function name).
        endpoint: &'static str,
        /// The scope it names.
        scope: &'static str,
    },
    /// An endpoint runs in atomic mode, but the store lends no transactions on its database.
    #[error(
        "endpoint `{endpoint}` runs in atomic mode on {database}, but the idempotency store \
         `{store}` offers no {database} transactions, so the handler's writes could not commit \
         with its stored response: build the engine with a store that does (`SqliteStore` for \
         SQLite, `PostgresStore` for PostgreSQL), on the database holding the endpoint's tables, \
         or take no `Tx` in the handler"
    )]
    AtomicUnsupported {
        /// The endpoint (module path and function name).
        endpoint: &'static str,
        /// The database of its transaction (`"SQLite"`, `"PostgreSQL"`).
        database: &'static str,
        /// The store's type.
        store: &'static str,
    },
    /// `"global"` is built in and cannot be given a resolver.
    #[error("scope \"global\" is built in and takes no resolver")]
    ReservedScope,
}

#[cfg(test)]
mod tests {
    use super::in_module;

    #[test]
    fn module_prefixes_match_whole_segments() {
        assert!(in_module("app::admin::create", "app::admin"));
        assert!(in_module("app::admin", "app::admin"));
        assert!(!in_module("app::administrator::create", "app::admin"));
        assert!(!in_module("other::admin::create", "app::admin"));
    }
}
