//! The handle applications hold: the engine, the settings every face applies alike, and what
//! each face keeps beside them; configured once with [`Builder`].

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use http::HeaderName;

use crate::endpoint::{self, Endpoint};
use crate::engine::Engine;
use crate::error::StoreError;
use crate::settings::limits::Limits;
use crate::settings::scope::Scopes;
use faces::Faces;

mod builder;
mod error;
mod faces;
mod records;
mod serves;
mod sweeper;

pub use builder::Builder;
pub use error::BuildError;
pub use faces::{FaceSetup, ProtobufDescriptors, RenderedAs, Renderer, Setup};
pub use records::Records;
pub use serves::{Handlers, Served, Serves};

/// The idempotency engine: a store, the policy every idempotent operation follows, and the
/// settings of its faces. Built once with [`Builder`], shared by every face.
///
/// Cheap to clone (one `Arc`). axum handlers get it from the router's state, so the state must
/// provide it: either the state *is* an `Idempotency`, or `Idempotency: FromRef<YourState>`
/// (derive `FromRef` on your state struct). A router without one does not compile.
///
/// ```
/// use idem_core::idempotency::Idempotency;
/// use idem_core::store::MemoryStore;
///
/// # fn main() -> Result<(), idem_core::idempotency::BuildError> {
/// let idempotency = Idempotency::builder()
///     .store(MemoryStore::new())
///     // Whose keys these are: here, the user id an auth layer put in the request extensions.
///     .scope("user", |caller| caller.extension::<UserId>().map(|u| u.0.clone()))
///     .build()?;
/// assert_eq!(idempotency.header_name(), "idempotency-key");
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
    header: HeaderName,
    faces: Faces,
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
        &self.inner.header
    }

    /// Deletes up to `limit` expired records now; returns how many. The sweeper calls this.
    pub async fn purge_expired(&self, limit: u32) -> Result<u64, StoreError> {
        self.inner.engine.purge_expired(limit).await
    }

    /// The engine every face runs its requests through: for a face written outside idem (a
    /// message consumer, another framework), which builds an
    /// [`Attempt`](crate::engine::Attempt) per request and runs it with
    /// [`Engine::run`](crate::engine::Engine::run), as the built-in faces do.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// The resolvers of the engine's scopes, for a face to find a request's scope value.
    pub fn scopes(&self) -> &Scopes {
        &self.inner.scopes
    }

    /// The size limits every face applies.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// What a face kept of type `T`: its settings from the builder, or what its
    /// [`FaceSetup`] prepared at build.
    pub fn face<T: Any>(&self) -> Option<&T> {
        self.inner.faces.get()
    }
}

/// The engine is its own handle: a face that takes "anything holding an engine" (the tower
/// layer, a gRPC service's state) takes the engine itself, or a reference to it.
impl AsRef<Idempotency> for Idempotency {
    fn as_ref(&self) -> &Idempotency {
        self
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
            .field("header", &self.inner.header)
            .finish_non_exhaustive()
    }
}
