//! What the gRPC face adds to the engine, below the adapter: what `#[idempotent]` declares about
//! a method (and the registry of them the builder checks), the engine's answers as gRPC statuses, how a reply is stored and replayed, and the deterministic encoding of a request
//! message that its fingerprint is taken over (with the descriptors it needs).

pub(crate) mod canonical;
pub(crate) mod method;
pub(crate) mod settings;
pub(crate) mod status;
pub(crate) mod stored;
