//! The adapters: each turns a transport into an engine call and the engine's answer back. The
//! attribute (`#[idempotent]`, one axum handler at a time) and the tower layer (every mutating
//! route of a router) share the HTTP flow; the programmatic API runs work that is not an HTTP
//! handler; the gRPC face runs `#[idempotent]` tonic methods; `Tx` lends atomic mode's transaction to a handler or an operation.

#[doc(hidden)]
pub mod attribute;
pub(crate) mod flow;
#[cfg(all(feature = "tonic", any(feature = "sqlite", feature = "postgres")))]
pub(crate) mod grpc_tx;
pub(crate) mod layer;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod tx;
