//! The HTTP vocabulary the attribute and the layer share: reading the key and fingerprinting a
//! request, capturing and replaying a response, and the engine's own answers (problem+json).
//! Below the faces, above the transport-neutral engine.

pub(crate) mod rejection;
pub(crate) mod replay;
pub(crate) mod request;
pub(crate) mod response;
