//! What each face (transport) keeps on the handle beside the transport-neutral settings, and how
//! a face takes part in [`Builder::build`](super::Builder::build).
//!
//! The core knows no transport: a face stores its own settings on the handle by their type
//! ([`Faces`]), and checks what it serves, or prepares what it needs, when the engine is built
//! (a [`FaceSetup`] it registers with [`inventory::submit!`]).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::error::BuildError;
use crate::rejection::Rejection;
use crate::settings::scope::Scopes;
use crate::store::Capabilities;

/// Settings of the faces, one value per type.
#[derive(Default)]
pub(super) struct Faces(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Faces {
    pub(super) fn get<T: Any>(&self) -> Option<&T> {
        self.0.get(&TypeId::of::<T>())?.downcast_ref()
    }

    pub(super) fn get_or_default<T: Any + Default + Send + Sync>(&mut self) -> &mut T {
        let value = self
            .0
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(T::default()));
        match value.downcast_mut() {
            Some(value) => value,
            None => unreachable!("a face's settings are keyed by their own type"),
        }
    }

    pub(super) fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(value));
    }
}

impl fmt::Debug for Faces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faces")
            .field("count", &self.0.len())
            .finish()
    }
}

/// How the application renders the engine's own answers, as set with
/// [`Builder::render_rejections`](super::Builder::render_rejections): a face reads the renderer
/// whose output is its own response type, `Renderer<axum::response::Response>` for the HTTP
/// faces.
pub struct Renderer<R>(Arc<dyn Fn(&Rejection) -> R + Send + Sync>);

impl<R> Renderer<R> {
    pub(super) fn new(render: impl Fn(&Rejection) -> R + Send + Sync + 'static) -> Self {
        Self(Arc::new(render))
    }

    /// The application's answer for `rejection`.
    pub fn render(&self, rejection: &Rejection) -> R {
        (self.0)(rejection)
    }
}

impl<R> fmt::Debug for Renderer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Renderer")
    }
}

/// The output type of the renderer the application gave, which a face checks is its own.
#[derive(Debug, Clone, Copy)]
pub struct RenderedAs {
    /// `TypeId::of::<R>()`.
    pub type_id: TypeId,
    /// `std::any::type_name::<R>()`, for the error that says it is not the face's.
    pub type_name: &'static str,
}

/// The encoded `FileDescriptorSet`s given to
/// [`Builder::protobuf_descriptors`](super::Builder::protobuf_descriptors), in order, for the
/// face that fingerprints protobuf messages to decode.
#[derive(Debug, Default, Clone)]
pub struct ProtobufDescriptors(Vec<Vec<u8>>);

impl ProtobufDescriptors {
    pub(super) fn push(&mut self, encoded: &[u8]) {
        self.0.push(encoded.to_vec());
    }

    /// Each set, as given.
    pub fn sets(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}

/// A face's part of [`Builder::build`](super::Builder::build), registered with
/// `inventory::submit! { FaceSetup(my_setup) }`: it checks what the face serves (and may refuse
/// the build with a [`BuildError`]) and keeps what it prepared on the handle
/// ([`Setup::insert`]). Every setup linked into the binary runs, in no set order, after the
/// core's own checks.
pub struct FaceSetup(pub fn(&mut Setup<'_>) -> Result<(), BuildError>);

inventory::collect!(FaceSetup);

/// What a [`FaceSetup`] sees of the engine being built.
pub struct Setup<'a> {
    pub(super) scopes: &'a Scopes,
    pub(super) capabilities: &'a Capabilities,
    pub(super) store: &'static str,
    pub(super) served: &'a super::serves::Served,
    pub(super) faces: &'a mut Faces,
}

impl Setup<'_> {
    /// The engine's scopes.
    pub fn scopes(&self) -> &Scopes {
        self.scopes
    }

    /// What the store offers.
    pub fn capabilities(&self) -> &Capabilities {
        self.capabilities
    }

    /// The store's type name, for errors.
    pub fn store_name(&self) -> &'static str {
        self.store
    }

    /// Whether the engine was told it serves the handler at Rust path `handler`
    /// ([`Builder::serves`](super::Builder::serves)): the handlers a face checks at build.
    pub fn serves(&self, handler: &str) -> bool {
        self.served.contains(handler)
    }

    /// The faces' settings of type `T`, as the builder holds them.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.faces.get()
    }

    /// Keeps `value` on the handle, where [`Idempotency::face`](super::Idempotency::face) finds
    /// it.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.faces.insert(value);
    }
}
