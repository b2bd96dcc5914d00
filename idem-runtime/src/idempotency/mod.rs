//! The handle applications hold: the engine plus the settings of the HTTP adapters, configured
//! once with [`Builder`].

use std::fmt;
use std::sync::Arc;

use http::HeaderName;

use crate::http::endpoint::{self, Endpoint};
use crate::http::settings::HttpSettings;
#[cfg(feature = "tonic")]
use crate::rpc::settings::GrpcSettings;
use idem_core::engine::Engine;
use idem_core::error::StoreError;
use idem_core::settings::limits::Limits;
use idem_core::settings::scope::Scopes;

mod builder;
mod checks;
mod error;
mod records;
mod sweeper;

pub use builder::Builder;
pub use error::BuildError;
pub use records::{RecordDetail, Records};

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
///     .scope("user", |caller| caller.extension::<UserId>().map(|u| u.0.clone()))
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
    engine: Arc<Engine>,
    scopes: Scopes,
    limits: Limits,
    http: HttpSettings,
    #[cfg(feature = "tonic")]
    grpc: GrpcSettings,
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

    /// The engine the adapters run requests through.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// The resolvers of the engine's scopes.
    pub(crate) fn scopes(&self) -> &Scopes {
        &self.inner.scopes
    }

    /// The size limits every face applies.
    pub(crate) fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The HTTP adapters' settings.
    pub(crate) fn http(&self) -> &HttpSettings {
        &self.inner.http
    }

    /// The gRPC face's settings.
    #[cfg(feature = "tonic")]
    pub(crate) fn grpc(&self) -> &GrpcSettings {
        &self.inner.grpc
    }
}

impl fmt::Debug for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = &self.inner.engine;
        f.debug_struct("Idempotency")
            .field("store", &engine.store_name())
            .field("capabilities", engine.capabilities())
            .field("policy", engine.policy())
            .field("scopes", &self.inner.scopes)
            .field("limits", &self.inner.limits)
            .field("http", &self.inner.http)
            .finish_non_exhaustive()
    }
}
