//! Idempotency keys for [axum] handlers: run the operation once, answer every retry with the
//! first answer.
//!
//! A client that sends `POST /v1/charges` with `Idempotency-Key: <uuid>` and loses the response
//! retries with the same key. With one attribute on the handler, the server executes the charge
//! once; every retry gets the stored response, byte for byte, with `Idempotent-Replayed: true`.
//!
//! ```
//! use axum::{Json, Router, routing::post, http::StatusCode};
//! use idem_runtime::{Idempotency, idempotent, store::MemoryStore};
//! # #[derive(serde::Deserialize)] struct NewCharge { amount: u64 }
//!
//! #[idempotent(scope = "global", ttl = "24h")]
//! async fn create_charge(Json(req): Json<NewCharge>) -> (StatusCode, String) {
//!     // Runs at most once per key.
//!     (StatusCode::CREATED, format!("charged {}", req.amount))
//! }
//!
//! # fn main() -> Result<(), idem_runtime::BuildError> {
//! let idempotency = Idempotency::builder().store(MemoryStore::new()).build()?;
//! let app: Router = Router::new()
//!     .route("/v1/charges", post(create_charge))
//!     .with_state(idempotency);
//! # Ok(()) }
//! ```
//!
//! # Where things are
//! - [`idempotent`]: the attribute and its arguments.
//! - [`Idempotency`]: the engine, built with [`Builder`]: store, scopes, header name, limits.
//! - [`store`]: the [`Store`](store::Store) trait and the memory, SQLite and PostgreSQL stores.
//! - [`Rejection`]: the `application/problem+json` answers the engine gives itself.
//!
//! # Feature flags
//! - `sqlite`: [`store::SqliteStore`], on sqlx with a bundled SQLite.
//! - `postgres`: [`store::PostgresStore`], on sqlx.
//!
//! [axum]: https://docs.rs/axum
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod atomic;
pub mod clock;
mod endpoint;
mod engine;
mod error;
mod fingerprint;
mod key;
mod response;
pub mod store;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
pub use atomic::{AtomicDatabase, AtomicParam, Tx};
#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "sqlite", feature = "postgres"))))]
pub use atomic::AnyTx;
pub use endpoint::{Endpoint, GLOBAL_SCOPE, InFlightMode, KeyMode};
pub use engine::{Builder, Idempotency};
pub use error::{BuildError, KeyError, Rejection, StoreError};
pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, MAX_KEY_LEN, RecordKey};
pub use response::{REPLAYED_HEADER, StoredResponse};

#[doc = include_str!("docs/idempotent.md")]
pub use idem_macros::idempotent;

/// What `#[idempotent]` expands to. Not public API: anything here may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::endpoint::{Endpoint, InFlightMode, KeyMode, Registration};
    pub use crate::engine::flow::{Pending, Ready, begin};
    pub use axum::body::Body;
    pub use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
    pub use axum::handler::Handler;
    pub use axum::response::{IntoResponse, Response};
    pub use inventory;

    /// The future type of every generated handler.
    pub type HandlerFuture =
        ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Response> + Send>>;
}
