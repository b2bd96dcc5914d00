//! What `#[idempotent]` expands to: the glue between generated handlers and the HTTP flow.
//! Not public API: anything here may change in any release.

#![allow(unreachable_pub)]

pub use crate::face::endpoint::{AtomicNeed, Endpoint, InFlightMode, KeyMode, Registration};
pub use crate::face::flow::{Pending, Ready, begin};
pub use axum::body::Body;
pub use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
pub use axum::handler::Handler;
pub use axum::response::{IntoResponse, Response};
pub use inventory;

/// The future type of every generated handler.
pub type HandlerFuture =
    ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Response> + Send>>;

/// Finds, per parameter type, whether the handler runs in atomic mode: `(&&Probe::<T>::NEW)
/// .atomic_need()` picks [`ProbeAtomic`] when `T` is a transaction parameter and falls back to
/// [`ProbePlain`] otherwise (method resolution tries `&&Probe` before `&Probe`). The handler's
/// types are concrete, so this settles at compile time without specialisation.
pub struct Probe<T: ?Sized>(::core::marker::PhantomData<fn() -> *const T>);

impl<T: ?Sized> Probe<T> {
    /// The probe of `T`.
    pub const NEW: Self = Self(::core::marker::PhantomData);
}

/// The probe of a transaction parameter.
pub trait ProbeAtomic {
    /// What the parameter needs from the store.
    fn atomic_need(&self) -> Option<AtomicNeed>;
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl<T: crate::face::tx::AtomicParam> ProbeAtomic for &Probe<T> {
    fn atomic_need(&self) -> Option<AtomicNeed> {
        Some(T::need())
    }
}

/// The probe of any other parameter.
pub trait ProbePlain {
    /// Nothing.
    fn atomic_need(&self) -> Option<AtomicNeed>;
}

impl<T: ?Sized> ProbePlain for Probe<T> {
    fn atomic_need(&self) -> Option<AtomicNeed> {
        None
    }
}

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
