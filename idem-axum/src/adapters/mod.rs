//! The adapters: each turns an HTTP request into engine calls and the engine's answer back. The
//! attribute (`#[idempotent]`, one axum handler at a time) and the tower layer (every mutating
//! route of a router) share one flow; `atomic` lends the store's transactions to a handler.

pub mod atomic;
#[doc(hidden)]
pub mod attribute;
pub(crate) mod flow;
pub(crate) mod layer;
