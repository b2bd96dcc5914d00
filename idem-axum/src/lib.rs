//! The HTTP faces of [idem](https://docs.rs/idem-runtime), for [axum] and [tower]: what
//! `#[idempotent]` handlers expand to, [`IdempotencyLayer`] for every mutating route of a
//! router, response capture and byte-exact replay, the engine's `application/problem+json`
//! answers ([`Problem`]) and OpenAPI ([`openapi`], feature `utoipa`), on the engine of
//! [`idem_core`].
//!
//! Applications use these through `idem-runtime`, which re-exports each at its root; this crate
//! is what a crate lending the transactions of another database library to handlers builds on
//! ([`atomic`]).
//!
//! [axum]: https://docs.rs/axum
//! [tower]: https://docs.rs/tower
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, bottom up; each imports only from those before it: `http` (the key header and a
// request's fingerprint, body limits, capturing and replaying a response, which responses are
// stored, problem+json, the HTTP faces' part of the engine's handle), the adapters (the flow
// the attribute and the layer share, the attribute's generated code's plumbing, the layer, and
// atomic mode's extractor contract), then `openapi`.
mod http;

mod adapters;
#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
pub mod openapi;

pub use crate::adapters::atomic;
pub use crate::adapters::layer::{IdempotencyLayer, IdempotencyService, RouteSettings};
pub use crate::http::problem::Problem;
pub use crate::http::response::{REPLAYED_HEADER, StoredResponse};

#[doc(hidden)]
pub use crate::adapters::attribute as __private;
