//! The gRPC settings of an engine: the protobuf descriptors its request fingerprints follow.

use super::canonical::{CanonicalError, Schemas};

/// Set on the [`Builder`](crate::Builder) with `protobuf_descriptors`.
#[derive(Debug, Default)]
pub(crate) struct GrpcSettings {
    schemas: Schemas,
    /// The first descriptor set that did not decode, reported by `build`.
    pub(crate) error: Option<String>,
}

impl GrpcSettings {
    /// Adds the messages of an encoded `FileDescriptorSet`.
    pub(crate) fn add_descriptors(&mut self, encoded: &[u8]) {
        if let Err(error) = self.schemas.add_file_descriptor_set(encoded) {
            self.error.get_or_insert(error.to_string());
        }
    }

    /// Whether the descriptors hold message `full_name`.
    pub(crate) fn knows(&self, full_name: &str) -> bool {
        self.schemas.contains(full_name)
    }

    /// The deterministic encoding of a request message named `full_name`, as prost encoded it.
    pub(crate) fn canonical(
        &self,
        full_name: &str,
        encoded: &[u8],
    ) -> Result<Vec<u8>, CanonicalError> {
        self.schemas.canonical(full_name, encoded, None)
    }
}
