//! The engine: configuration, scope resolution and the per-request state machine.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderName;
use http::request::Parts;

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::endpoint::{self, Endpoint, GLOBAL_SCOPE};
use crate::error::{BuildError, StoreError};
use crate::store::{DynStore, Store};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod atomic;
pub(crate) mod flow;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::atomic::store_matches as atomic_store_matches;
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn atomic_store_matches(_: &dyn std::any::Any, _: &str) -> bool {
    false
}
mod guard;

type Resolver = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

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
    store: Arc<dyn DynStore>,
    scopes: HashMap<String, Resolver>,
    policy: Policy,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub(crate) header: HeaderName,
    pub(crate) lease: Duration,
    pub(crate) wait_timeout: Duration,
    pub(crate) max_response_bytes: usize,
    pub(crate) retry_after: Duration,
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
        &self.inner.policy.header
    }

    /// Deletes up to `limit` expired records now; returns how many. The sweeper calls this.
    pub async fn purge_expired(&self, limit: u32) -> Result<u64, StoreError> {
        self.inner.store.purge_expired(self.now(), limit).await
    }

    /// Spawns a task on the current Tokio runtime that purges expired records every `period`,
    /// in batches of at most `batch` records so no purge holds a store lock for long. Abort the
    /// returned handle to stop it.
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn spawn_sweeper(&self, period: Duration, batch: u32) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
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

    pub(crate) fn store(&self) -> &Arc<dyn DynStore> {
        &self.inner.store
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.inner.policy
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The principal for `scope`: `Ok(None)` when the request has none, `Err(())` when the
    /// scope has no resolver at all (only possible with [`Builder::skip_endpoint_checks`]).
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
            .field("scopes", &scopes)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

/// Configures an [`Idempotency`] engine. Every setting but the store has a production default.
#[must_use]
pub struct Builder {
    store: Option<Arc<dyn DynStore>>,
    scopes: HashMap<String, Resolver>,
    reserved_scope: bool,
    check_endpoints: bool,
    policy: Policy,
    clock: Arc<dyn Clock>,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            store: None,
            scopes: HashMap::new(),
            reserved_scope: false,
            check_endpoints: true,
            policy: Policy {
                header: HeaderName::from_static("idempotency-key"),
                lease: Duration::from_secs(30),
                wait_timeout: Duration::from_secs(10),
                max_response_bytes: 2 * 1024 * 1024,
                retry_after: Duration::from_secs(1),
            },
            clock: Arc::new(SystemClock),
        }
    }
}

impl Builder {
    /// Where records live. Required.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = Some(Arc::new(store));
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
        self.policy.header = name;
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
        self.policy.max_response_bytes = limit;
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

    /// Skips the start-up checks of [`Builder::build`] over every `#[idempotent]` endpoint in
    /// the binary. For binaries holding several applications with different engines (test
    /// binaries, merged doctests), where some endpoints are never routed to this engine. A
    /// request to an endpoint whose scope has no resolver is then answered
    /// `500 idempotency_scope_unknown`, and one whose `Tx` does not match the store
    /// `500 idempotency_misconfigured`.
    pub fn skip_endpoint_checks(mut self) -> Self {
        self.check_endpoints = false;
        self
    }

    /// Builds the engine, checking that every `#[idempotent]` endpoint in the binary names a
    /// scope that has a resolver, and that every endpoint in atomic mode takes a `Tx` for the
    /// store's database.
    pub fn build(self) -> Result<Idempotency, BuildError> {
        if self.reserved_scope {
            return Err(BuildError::ReservedScope);
        }
        let store = self.store.ok_or(BuildError::MissingStore)?;
        let check = self.check_endpoints;
        let checked = || endpoint::registered().filter(move |_| check);
        if let Some(ep) =
            checked().find(|ep| ep.scope() != GLOBAL_SCOPE && !self.scopes.contains_key(ep.scope()))
        {
            return Err(BuildError::UnresolvedScope {
                endpoint: ep.name(),
                scope: ep.scope(),
            });
        }
        if let Some(ep) = checked().find(|ep| {
            ep.atomic()
                .is_some_and(|db| !atomic_store_matches(store.as_any(), db))
        }) {
            return Err(BuildError::AtomicStoreMismatch {
                endpoint: ep.name(),
                database: ep.atomic().unwrap_or_default(),
            });
        }
        Ok(Idempotency {
            inner: Arc::new(Inner {
                store,
                scopes: self.scopes,
                policy: self.policy,
                clock: self.clock,
            }),
        })
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}
