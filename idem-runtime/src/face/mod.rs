//! The faces: how applications reach the engine. The attribute (`#[idempotent]`, one handler at
//! a time), the tower layer (every mutating route of a router), and the programmatic API (work
//! that is not an HTTP handler). The first two share the HTTP flow.

#[doc(hidden)]
pub mod attribute;
pub(crate) mod endpoint;
pub(crate) mod flow;
pub(crate) mod layer;
pub(crate) mod offer;
pub(crate) mod operation;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod tx;
