//! What `#[idempotent]` expands to: the glue between generated handlers and the HTTP flow.
//! Not public API: anything here may change in any release.
//!
//! The generated code checks the handler twice, and each check is spanned at the user's own
//! tokens:
//!
//! - where the handler is written, per argument and without the router state: a body extractor
//!   before the last argument, and a second transaction ([`Probe`], [`Pair`]);
//! - where it is routed, once the router state `S` is known: the engine, and each argument's
//!   extractor ([`IdempotencyState`], [`ExtractParts`], [`StateParts`], [`ExtractLast`],
//!   [`StateLast`]). These bound only `S`, never an extractor type directly: a bound whose self
//!   type is still being inferred neither steers inference of `S` nor rejects the impl before `S`
//!   is known, so a mistake is reported by these traits' messages, with rustc's "required by this
//!   bound" note at the argument;
//! - or, when the router state is known where the handler is written (`state = S`, or inferred
//!   from `State<S>` arguments), the same checks per argument, there (see [`Declared`],
//!   [`Inferred`]).

#![allow(unreachable_pub)]

use std::marker::PhantomData;

pub use crate::adapters::atomic::AtomicParam;
pub use crate::adapters::flow::{Prepared, Started, begin};
pub use crate::http::request::fingerprint_of_request;
#[doc(hidden)]
pub use crate::http::request::{fresh_digests, raw_digest};
pub use axum::body::Body;
pub use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
pub use axum::handler::Handler;
pub use axum::response::{IntoResponse, Response};
pub use idem_core::endpoint::{AtomicNeed, Endpoint, KeyMode, Registration};
pub use idem_core::engine::{AtomicCommits, InFlightMode};
pub use idem_core::idempotency::{Handlers, Served, Serves};
pub use inventory;

use crate::http::problem::Problem;
use idem_core::idempotency::Idempotency;
use idem_core::rejection::Rejection;

mod state;

pub use state::{
    Declared, DeclaredLast, DeclaredParts, DeclaredState, DeclaredStateLast, DeclaredStateParts,
    Inferred, InferredChecks, InferredLast, InferredParts, InferredSkip, Known, KnownFallback,
    KnownHead, KnownIdempotency, KnownLastParts, KnownLastRequest,
};

/// The future type of every generated handler.
pub type HandlerFuture =
    ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Response> + Send>>;

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

// ---------------------------------------------------------------------------------------------
// Checks where the handler is written. The handler's argument types are concrete, so autoref
// "specialisation" settles each of them at compile time: `(&&Probe::<T>::NEW).method()` picks
// the impl for `&Probe<T>` when its bounds hold, and falls back to the one for `Probe<T>`
// (method resolution tries `&&Probe` before `&Probe`).

/// The probe of one argument type, `T`.
pub struct Probe<T: ?Sized>(PhantomData<fn() -> *const T>);

impl<T: ?Sized> Probe<T> {
    /// The probe of `T`.
    pub const NEW: Self = Self(PhantomData);
}

/// The probe of two argument types, `A` before `B`.
pub struct Pair<A: ?Sized, B: ?Sized>(PhantomData<fn() -> (*const A, *const B)>);

impl<A: ?Sized, B: ?Sized> Pair<A, B> {
    /// The probe of `A` and `B`.
    pub const NEW: Self = Self(PhantomData);
}

/// The probe of a transaction argument (`Tx`, `AnyTx`, under any name or alias).
pub trait ProbeAtomic {
    /// What the argument needs from the store.
    fn atomic_need(&self) -> Option<AtomicNeed>;
}

impl<T: AtomicParam> ProbeAtomic for &Probe<T> {
    fn atomic_need(&self) -> Option<AtomicNeed> {
        Some(T::need())
    }
}

/// The probe of any other argument.
pub trait ProbePlain {
    /// Nothing.
    fn atomic_need(&self) -> Option<AtomicNeed>;
}

impl<T: ?Sized> ProbePlain for Probe<T> {
    fn atomic_need(&self) -> Option<AtomicNeed> {
        None
    }
}

/// The probe of an argument before the last that consumes the request body.
///
/// The test is `T: FromRequest<(), ViaRequest>`: every body extractor generic over the state
/// (`Json`, `Form`, `Bytes`, `String`, `Request`, ...). [`ExtractParts`] accepts exactly these
/// types before the last argument, so that this check, and not a second error where the
/// handler is routed, reports the mistake.
pub trait ProbeBody<T: ?Sized> {
    /// Fails to compile: `T` must be the last argument.
    fn before_last(&self)
    where
        T: ConsumesTheBody;
}

impl<T> ProbeBody<T> for &Probe<T>
where
    T: FromRequest<()>,
{
    fn before_last(&self)
    where
        T: ConsumesTheBody,
    {
    }
}

/// The probe of an argument before the last that does not consume the body (as far as can be
/// told without the router state; [`ExtractParts`] tells the rest).
pub trait ProbeHead {
    /// Nothing to check.
    fn before_last(&self);
}

impl<T: ?Sized> ProbeHead for Probe<T> {
    fn before_last(&self) {}
}

/// Never implemented: the error for a body extractor before the last argument.
#[diagnostic::on_unimplemented(
    message = "`{Self}` consumes the request body, so it must be the last argument of an `#[idempotent]` handler",
    label = "consumes the request body, but is not the last argument",
    note = "the body can be read once: take at most one body extractor (`Json`, `Form`, `Bytes`, `String`, ...), as the last argument"
)]
pub trait ConsumesTheBody {}

/// The probe of two transaction arguments.
pub trait ProbeTwoTransactions<A: ?Sized, B: ?Sized> {
    /// Fails to compile: a handler takes at most one transaction.
    fn at_most_one_transaction(&self)
    where
        B: SecondTransaction<A>;
}

impl<A, B> ProbeTwoTransactions<A, B> for &Pair<A, B>
where
    A: AtomicParam,
    B: AtomicParam,
{
    fn at_most_one_transaction(&self)
    where
        B: SecondTransaction<A>,
    {
    }
}

/// The probe of two arguments of which at most one is a transaction.
pub trait ProbeOneTransaction {
    /// Nothing to check.
    fn at_most_one_transaction(&self);
}

impl<A: ?Sized, B: ?Sized> ProbeOneTransaction for Pair<A, B> {
    fn at_most_one_transaction(&self) {}
}

/// Never implemented: the error for a second transaction argument.
#[diagnostic::on_unimplemented(
    message = "`#[idempotent]` handlers take at most one transaction: this argument is a second one, after `{A}`",
    label = "a second transaction",
    note = "the handler's writes and its stored response commit in one transaction: send every write through the `{A}` argument"
)]
pub trait SecondTransaction<A: ?Sized> {}

// ---------------------------------------------------------------------------------------------
// Checks where the handler is routed, on the router state `S`.

/// `S: IdempotencyState`: the router state provides the `Idempotency` handle.
#[diagnostic::on_unimplemented(
    message = "the router state `{Self}` does not provide the `Idempotency` engine that `#[idempotent]` handlers need",
    label = "this `#[idempotent]` handler needs `Idempotency: FromRef<{Self}>`",
    note = "pass the engine as the state with `.with_state(idempotency)`, or add an `Idempotency` field to your state struct and `#[derive(FromRef)]` on it"
)]
pub trait IdempotencyState {
    /// The handle.
    fn idempotency(&self) -> Idempotency;
}

#[diagnostic::do_not_recommend]
impl<S> IdempotencyState for S
where
    Idempotency: FromRef<S>,
{
    fn idempotency(&self) -> Idempotency {
        Idempotency::from_ref(self)
    }
}

/// How an argument before the last is extracted: from the request head.
pub struct ViaParts;

/// How an argument before the last is "extracted" when it consumes the body: never, because
/// [`ProbeBody`] has already failed the build where the handler is written.
pub struct BodyBeforeLast;

/// `S: ExtractParts<T, M>`: `T`, an argument before the last, extracts from the request head.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not a `FromRequestParts<{Self}>` extractor, which every argument of an `#[idempotent]` handler but the last must be",
    label = "an argument of this handler does not implement `FromRequestParts<{Self}>`",
    note = "before the last argument, use extractors that leave the body unread: `Path<T>`, `Query<T>`, `HeaderMap`, `State<T>`, or a type implementing `FromRequestParts<{Self}>`"
)]
pub trait ExtractParts<T, M> {
    /// Runs `T::from_request_parts`, turning a rejection into its response.
    fn extract_parts(
        parts: &mut http::request::Parts,
        state: &Self,
    ) -> impl ::core::future::Future<Output = Result<T, Response>> + Send;
}

#[diagnostic::do_not_recommend]
impl<S, T> ExtractParts<T, ViaParts> for S
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

/// Accepts a body extractor before the last argument where the handler is routed, so the
/// mistake is reported once, at the argument, by [`ProbeBody`] (whose test is the same bound,
/// `T: FromRequest<()>`). A program using this impl does not compile; were it ever reached, it
/// would fail closed.
#[diagnostic::do_not_recommend]
impl<S, T> ExtractParts<T, BodyBeforeLast> for S
where
    S: Send + Sync,
    T: FromRequest<()>,
{
    async fn extract_parts(_: &mut http::request::Parts, _: &S) -> Result<T, Response> {
        Err(Problem(Rejection::Misconfigured {
            reason: "a body extractor before the last argument",
        })
        .into_response())
    }
}

/// `S: StateParts<T, X, M>`: [`ExtractParts`] for an argument written `State<X>`, which only
/// words the error differently.
#[diagnostic::on_unimplemented(
    message = "the router state `{Self}` does not provide `{X}`, which the argument `{T}` needs",
    label = "an argument of this handler needs `{X}: FromRef<{Self}>`",
    note = "use a state struct holding both the `Idempotency` engine and `{X}`, with `#[derive(Clone, FromRef)]`, and pass it to `.with_state(..)`"
)]
pub trait StateParts<T, X: ?Sized, M>: ExtractParts<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, X: ?Sized, M> StateParts<T, X, M> for S where S: ExtractParts<T, M> {}

/// `S: ExtractLast<T, M>`: `T`, the last argument, extracts from the whole request.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not an extractor for router state `{Self}`: the last argument of an `#[idempotent]` handler must implement `FromRequest<{Self}>` or `FromRequestParts<{Self}>`",
    label = "the last argument of this handler is not an extractor for router state `{Self}`",
    note = "use a body extractor such as `Json<T>`, `Form<T>`, `Bytes` or `String`, an extractor such as `Path<T>` or `State<T>`, or implement `FromRequest<{Self}>` for `{T}`"
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

/// `S: StateLast<T, X, M>`: [`ExtractLast`] for an argument written `State<X>`, which only
/// words the error differently.
#[diagnostic::on_unimplemented(
    message = "the router state `{Self}` does not provide `{X}`, which the argument `{T}` needs",
    label = "the last argument of this handler needs `{X}: FromRef<{Self}>`",
    note = "use a state struct holding both the `Idempotency` engine and `{X}`, with `#[derive(Clone, FromRef)]`, and pass it to `.with_state(..)`"
)]
pub trait StateLast<T, X: ?Sized, M>: ExtractLast<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, X: ?Sized, M> StateLast<T, X, M> for S where S: ExtractLast<T, M> {}
