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
//!
//! | feature | adds |
//! |---|---|
//! | `sqlite` | `store::SqliteStore`, on sqlx with a bundled SQLite, and atomic mode on it (`Tx<sqlx::Sqlite>`) |
//! | `postgres` | `store::PostgresStore`, on sqlx, and atomic mode on it (`Tx<sqlx::Postgres>`) |
//! | `utoipa` | `openapi::IdempotencyDoc`: the key header and the engine's answers in a utoipa OpenAPI document |
//!
//! None is on by default: the memory store needs none. With both `sqlite` and `postgres`,
//! `AnyTx` takes whichever store the engine was built with.
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
#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
pub mod openapi;
mod response;
pub mod store;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "sqlite", feature = "postgres"))))]
pub use atomic::AnyTx;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres"))))]
pub use atomic::{AtomicDatabase, AtomicParam, Tx};
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

    /// How a handler's `Tx<..>` or `AnyTx` parameter is handed over (atomic mode).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub use crate::atomic::AtomicParam;

    /// The user's handler future, checked at the handler's name: rustc then says "future
    /// returned by `name` is not `Send`" and shows the value held across an `.await`. Boxed so
    /// the check is made once: an opaque return type would repeat it wherever it is awaited.
    pub fn handler_future<F>(future: F) -> HandlerFuture
    where
        F: ::core::future::Future + Send + 'static,
        F::Output: HandlerOutput,
    {
        Box::pin(async move { future.await.into_handler_response() })
    }

    /// `T: HandlerOutput`: what a handler returns is a response.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` is not a response: an `#[idempotent]` handler must return a type that implements `IntoResponse`",
        label = "this handler returns `{Self}`, which does not implement `IntoResponse`",
        note = "return a status, a string, `Json<T>`, `(StatusCode, Json<T>)`, a `Result<T, E>` of responses, or implement `IntoResponse` for `{Self}`"
    )]
    pub trait HandlerOutput {
        /// `IntoResponse::into_response`.
        fn into_handler_response(self) -> Response;
    }

    #[diagnostic::do_not_recommend]
    impl<T: IntoResponse> HandlerOutput for T {
        fn into_handler_response(self) -> Response {
            self.into_response()
        }
    }

    // The generated `Handler` impl bounds only the router state `S`, through the three traits
    // below, never an extractor type directly: a bound whose self type is still being inferred
    // neither steers inference of `S` nor rejects the impl before `S` is known, so a mistake is
    // reported by these traits' messages at the user's tokens, not as "`Handler` not satisfied".

    /// `S: EngineState`: the router state provides the engine.
    #[diagnostic::on_unimplemented(
        message = "the router state `{Self}` does not provide the `Idempotency` engine that `#[idempotent]` handlers need",
        label = "this `#[idempotent]` handler needs `Idempotency: FromRef<{Self}>`",
        note = "pass the engine as the state with `.with_state(idempotency)`, or add an `Idempotency` field to your state struct and `#[derive(FromRef)]` on it"
    )]
    pub trait EngineState {
        /// The engine.
        fn engine(&self) -> crate::Idempotency;
    }

    #[diagnostic::do_not_recommend]
    impl<S> EngineState for S
    where
        crate::Idempotency: FromRef<S>,
    {
        fn engine(&self) -> crate::Idempotency {
            crate::Idempotency::from_ref(self)
        }
    }

    /// `S: ExtractParts<T>`: `T`, an argument before the last, extracts from the request head.
    #[diagnostic::on_unimplemented(
        message = "`{T}` does not implement `FromRequestParts<{Self}>`, which every argument of an `#[idempotent]` handler but the last must do",
        label = "an argument of this handler cannot be extracted with router state `{Self}`",
        note = "only the last argument may read the request body: move `Json`, `Form`, `Bytes`, `String` or another body extractor to the end",
        note = "`State<T>` needs the router state to provide `T`: `T: FromRef<{Self}>`"
    )]
    pub trait ExtractParts<T> {
        /// Runs `T::from_request_parts`, turning a rejection into its response.
        fn extract_parts(
            parts: &mut http::request::Parts,
            state: &Self,
        ) -> impl ::core::future::Future<Output = Result<T, Response>> + Send;
    }

    #[diagnostic::do_not_recommend]
    impl<S, T> ExtractParts<T> for S
    where
        S: Send + Sync,
        T: FromRequestParts<S>,
    {
        async fn extract_parts(parts: &mut http::request::Parts, state: &S) -> Result<T, Response> {
            T::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)
        }
    }

    /// `S: ExtractLast<T, M>`: `T`, the last argument, extracts from the whole request.
    #[diagnostic::on_unimplemented(
        message = "`{T}` does not implement `FromRequest<{Self}>`, which the last argument of an `#[idempotent]` handler must do",
        label = "the last argument of this handler cannot be extracted with router state `{Self}`",
        note = "the last argument must be an extractor: a body extractor such as `Json`, `Form`, `Bytes` or `String`, or any `FromRequestParts` one",
        note = "`State<T>` needs the router state to provide `T`: `T: FromRef<{Self}>`"
    )]
    pub trait ExtractLast<T, M> {
        /// Runs `T::from_request`, turning a rejection into its response.
        fn extract_last(
            request: Request,
            state: &Self,
        ) -> impl ::core::future::Future<Output = Result<T, Response>> + Send;
    }

    #[diagnostic::do_not_recommend]
    impl<S, T, M> ExtractLast<T, M> for S
    where
        S: Send + Sync,
        T: FromRequest<S, M>,
    {
        async fn extract_last(request: Request, state: &S) -> Result<T, Response> {
            T::from_request(request, state)
                .await
                .map_err(IntoResponse::into_response)
        }
    }
}
