//! The gRPC face's part of the engine's handle: the protobuf descriptors its request
//! fingerprints follow, decoded when the engine is built, and the start-up checks of the
//! `#[idempotent]` tonic methods.

use super::canonical::{CanonicalError, Schemas};
use super::method;
use idem_core::idempotency::{BuildError, FaceSetup, ProtobufDescriptors, Setup};

/// The decoded descriptors, kept on the handle by [`setup`].
#[derive(Debug, Default)]
pub(crate) struct GrpcSettings {
    schemas: Schemas,
}

impl GrpcSettings {
    /// Whether the descriptors hold message `full_name`.
    pub(crate) fn knows(&self, full_name: &str) -> bool {
        self.schemas.contains(full_name)
    }

    /// Calls `f` with the deterministic encoding of a request message named `full_name`, as
    /// prost encoded it (written in the thread's buffers), and returns what it returns.
    pub(crate) fn with_canonical<R>(
        &self,
        full_name: &str,
        encoded: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, CanonicalError> {
        self.schemas.with_canonical(full_name, encoded, None, f)
    }
}

/// Decodes the descriptors given to the builder, then checks each `#[idempotent]` tonic method
/// the engine serves: its scope has a resolver and its request message is in the descriptors.
fn setup(setup: &mut Setup<'_>) -> Result<(), BuildError> {
    let mut settings = GrpcSettings::default();
    for set in setup
        .get::<ProtobufDescriptors>()
        .into_iter()
        .flat_map(ProtobufDescriptors::sets)
    {
        if let Err(error) = settings.schemas.add_file_descriptor_set(set) {
            return Err(BuildError::ProtobufDescriptors(error.to_string()));
        }
    }
    for m in method::registered().filter(|m| setup.serves(m.handler())) {
        if setup.scopes().check(m.scope()).is_err() {
            return Err(BuildError::UnresolvedScope {
                endpoint: m.handler(),
                scope: m.scope(),
            });
        }
        let message = m.message();
        if !settings.knows(&message) {
            return Err(BuildError::MissingDescriptors {
                method: m.handler(),
                message,
            });
        }
    }
    setup.insert(settings);
    Ok(())
}

inventory::submit! { FaceSetup(setup) }
