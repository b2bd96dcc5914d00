//! The HTTP vocabulary the attribute and the layer share: the key header and a request's
//! fingerprint, body limits, capturing and replaying a response, which responses are stored,
//! the engine's own answers (problem+json), the `#[idempotent]` registry and the settings.
//! Below the adapters, above the transport-neutral engine.

pub(crate) mod capture;
pub(crate) mod problem;
pub(crate) mod release;
pub(crate) mod replay;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod settings;
