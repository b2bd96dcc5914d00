//! Checks where the handler is written once its router state `S` is known: given with
//! `#[idempotent(state = S)]` ([`Declared`]), or inferred from the handler's `State<S>` arguments
//! ([`Inferred`]). Each argument is checked on its own, the call spanned at its type (every token
//! of it: rustc reports a method whose generics it infers at the whole call), so the error lands
//! on the argument rather than where the handler is routed.
//!
//! Every check holds exactly when the corresponding bound where the handler is routed
//! ([`ExtractParts`], [`ExtractLast`]) holds: they word the error for the argument, nothing else.
//! With a declared state the handler implements `Handler` for `S` alone ([`DeclaredState`]) and
//! extracts through [`Known`], so an argument's mistake is reported once, here.

use std::marker::PhantomData;

use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::response::{IntoResponse, Response};

use super::{ExtractLast, ExtractParts, IdempotencyState};
use crate::http::problem::Problem;
use idem_core::idempotency::Idempotency;
use idem_core::rejection::Rejection;

/// The checks of argument `T` (written `State<X>`, or `X` is `()`) for the router state `S`
/// given with `state = S`.
pub struct Declared<S, T: ?Sized, X: ?Sized>(Marker<S>, Marker<T>, Marker<X>);

/// A type parameter, as a zero-sized field that is `Send`, `Sync` and `'static` whatever it is.
type Marker<T> = PhantomData<fn() -> *const T>;

impl<S, T: ?Sized, X: ?Sized> Declared<S, T, X> {
    /// The checks of `T` for `S`.
    pub const NEW: Self = Self(PhantomData, PhantomData, PhantomData);
}

impl<S, T, X: ?Sized> Declared<S, T, X> {
    /// Fails to compile unless `S` provides the `Idempotency` handle: the check of
    /// `state = S` itself.
    pub fn idempotency(&self)
    where
        S: IdempotencyState,
    {
    }

    /// Fails to compile unless `T`, an argument before the last, extracts from the head.
    pub fn head<M>(&self)
    where
        S: DeclaredParts<T, M>,
    {
    }

    /// Fails to compile unless `T`, the last argument, extracts from the request.
    pub fn last<M>(&self)
    where
        S: DeclaredLast<T, M>,
    {
    }

    /// [`head`](Self::head) for an argument written `State<X>`.
    pub fn head_state<M>(&self)
    where
        S: DeclaredStateParts<T, X, M>,
    {
    }

    /// [`last`](Self::last) for an argument written `State<X>`.
    pub fn last_state<M>(&self)
    where
        S: DeclaredStateLast<T, X, M>,
    {
    }
}

/// `S: DeclaredParts<T, M>`: [`ExtractParts`], worded for the argument.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not an extractor for the state `{Self}`: every argument of an `#[idempotent]` handler but the last must implement `FromRequestParts<{Self}>`",
    label = "does not implement `FromRequestParts<{Self}>`",
    note = "before the last argument, use extractors that leave the body unread: `Path<T>`, `Query<T>`, `HeaderMap`, `State<T>`, or implement `FromRequestParts<{Self}>` for `{T}`"
)]
pub trait DeclaredParts<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, M> DeclaredParts<T, M> for S where S: ExtractParts<T, M> {}

/// `S: DeclaredLast<T, M>`: [`ExtractLast`], worded for the argument.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not an extractor for the state `{Self}`: the last argument of an `#[idempotent]` handler must implement `FromRequest<{Self}>` or `FromRequestParts<{Self}>`",
    label = "does not implement `FromRequest<{Self}>` or `FromRequestParts<{Self}>`",
    note = "use a body extractor such as `Json<T>`, `Form<T>`, `Bytes` or `String`, an extractor such as `Path<T>` or `State<T>`, or implement `FromRequest<{Self}>` for `{T}`"
)]
pub trait DeclaredLast<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, M> DeclaredLast<T, M> for S where S: ExtractLast<T, M> {}

/// `S: DeclaredStateParts<T, X, M>`: [`ExtractParts`] for an argument written `State<X>`.
#[diagnostic::on_unimplemented(
    message = "the state `{Self}` does not provide `{X}`, which the argument `{T}` needs",
    label = "needs `{X}: FromRef<{Self}>`",
    note = "add a field of type `{X}` to `{Self}` and `#[derive(Clone, FromRef)]` on it, or implement `FromRef<{Self}>` for `{X}`"
)]
pub trait DeclaredStateParts<T, X: ?Sized, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, X: ?Sized, M> DeclaredStateParts<T, X, M> for S where S: ExtractParts<T, M> {}

/// `S: DeclaredStateLast<T, X, M>`: [`ExtractLast`] for an argument written `State<X>`.
#[diagnostic::on_unimplemented(
    message = "the state `{Self}` does not provide `{X}`, which the argument `{T}` needs",
    label = "needs `{X}: FromRef<{Self}>`",
    note = "add a field of type `{X}` to `{Self}` and `#[derive(Clone, FromRef)]` on it, or implement `FromRef<{Self}>` for `{X}`"
)]
pub trait DeclaredStateLast<T, X: ?Sized, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, X: ?Sized, M> DeclaredStateLast<T, X, M> for S where S: ExtractLast<T, M> {}

/// The router state inferred from the handler's `State<S>` arguments (all of one type `S`).
///
/// `S` may be only a part of the router's state (`S: FromRef<AppState>`), which cannot be told
/// where the handler is written: the checks then apply only when `S` provides the engine, as a
/// router state must (the impl for `&Inferred<S>`); otherwise nothing is checked here (the one
/// for `Inferred<S>`). An `S` that provides the engine yet is a part of the router's state, with
/// an argument that extracts for the router's state only, is reported here although it would
/// work: `state = AppState` says which state is meant.
pub struct Inferred<S, T: ?Sized>(Marker<S>, Marker<T>);

impl<S, T: ?Sized> Inferred<S, T> {
    /// The checks of argument `T` for the inferred state `S`.
    pub const NEW: Self = Self(PhantomData, PhantomData);
}

/// The checks of [`Inferred`], when `S` provides the engine.
pub trait InferredChecks<S, T> {
    /// Fails to compile unless `T`, an argument before the last, extracts from the head.
    fn head<M>(&self)
    where
        S: InferredParts<T, M>;

    /// Fails to compile unless `T`, the last argument, extracts from the request.
    fn last<M>(&self)
    where
        S: InferredLast<T, M>;
}

impl<S, T> InferredChecks<S, T> for &Inferred<S, T>
where
    Idempotency: FromRef<S>,
{
    fn head<M>(&self)
    where
        S: InferredParts<T, M>,
    {
    }

    fn last<M>(&self)
    where
        S: InferredLast<T, M>,
    {
    }
}

/// No checks: `S` does not provide the engine, so it is a part of the router's state.
pub trait InferredSkip {
    /// Nothing to check.
    fn head(&self) {}
    /// Nothing to check.
    fn last(&self) {}
}

impl<S, T: ?Sized> InferredSkip for Inferred<S, T> {}

/// `S: InferredParts<T, M>`: [`ExtractParts`], worded for the argument and an inferred state.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not an extractor for the state `{Self}`: every argument of an `#[idempotent]` handler but the last must implement `FromRequestParts<{Self}>`",
    label = "does not implement `FromRequestParts<{Self}>`",
    note = "before the last argument, use extractors that leave the body unread: `Path<T>`, `Query<T>`, `HeaderMap`, `State<T>`, or implement `FromRequestParts<{Self}>` for `{T}`",
    note = "`{Self}` is the state because the handler takes `State<{Self}>`; if the router's state is another type, name it: `#[idempotent(.., state = AppState)]`"
)]
pub trait InferredParts<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, M> InferredParts<T, M> for S where S: ExtractParts<T, M> {}

/// `S: InferredLast<T, M>`: [`ExtractLast`], worded for the argument and an inferred state.
#[diagnostic::on_unimplemented(
    message = "`{T}` is not an extractor for the state `{Self}`: the last argument of an `#[idempotent]` handler must implement `FromRequest<{Self}>` or `FromRequestParts<{Self}>`",
    label = "does not implement `FromRequest<{Self}>` or `FromRequestParts<{Self}>`",
    note = "use a body extractor such as `Json<T>`, `Form<T>`, `Bytes` or `String`, an extractor such as `Path<T>` or `State<T>`, or implement `FromRequest<{Self}>` for `{T}`",
    note = "`{Self}` is the state because the handler takes `State<{Self}>`; if the router's state is another type, name it: `#[idempotent(.., state = AppState)]`"
)]
pub trait InferredLast<T, M> {}

#[diagnostic::do_not_recommend]
impl<S, T, M> InferredLast<T, M> for S where S: ExtractLast<T, M> {}

/// `R: DeclaredState<S>`: the router state `R` is the state `S` the handler was declared for.
#[diagnostic::on_unimplemented(
    message = "this `#[idempotent]` handler is for the state `{S}` (`state = {S}`), but it is routed with the state `{Self}`",
    label = "routed with the state `{Self}`",
    note = "route it in a router whose state is `{S}`, or declare that router's state instead: `state = {Self}`"
)]
pub trait DeclaredState<S> {
    /// The state, as the declared type.
    fn declared(self) -> S;
}

#[diagnostic::do_not_recommend]
impl<S> DeclaredState<S> for S {
    fn declared(self) -> S {
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Extraction for a handler with a declared state. Its `Handler` impl is for `S` alone, without
// bounds on the arguments (those would fail a second time, where the handler is routed), so the
// calls settle by autoref "specialisation" on concrete types: the impl whose bounds hold, else
// a fallback that [`Declared`]'s checks have already failed the build for. Were it ever
// reached, it would fail closed.

/// Extraction of argument `T` with state `S`.
pub struct Known<T, S>(Marker<T>, Marker<S>);

impl<T, S> Known<T, S> {
    /// The extraction of `T` with `S`.
    pub const NEW: Self = Self(PhantomData, PhantomData);
}

/// The handle of state `S`: `(&&Known::<Idempotency, S>::NEW).idempotency(&state)`.
pub trait KnownIdempotency<S> {
    /// The handle.
    fn idempotency(&self, state: &S) -> Result<Idempotency, Box<Response>>;
}

impl<S> KnownIdempotency<S> for &Known<Idempotency, S>
where
    Idempotency: FromRef<S>,
{
    fn idempotency(&self, state: &S) -> Result<Idempotency, Box<Response>> {
        Ok(Idempotency::from_ref(state))
    }
}

/// An argument before the last: `(&&Known::<T, S>::NEW).extract_head(..)`.
pub trait KnownHead<T, S> {
    /// `T::from_request_parts`, its rejection turned into its response.
    fn extract_head(
        &self,
        parts: &mut http::request::Parts,
        state: &S,
    ) -> impl Future<Output = Result<T, Response>> + Send;
}

impl<T, S> KnownHead<T, S> for &Known<T, S>
where
    S: Send + Sync,
    T: FromRequestParts<S>,
{
    async fn extract_head(
        &self,
        parts: &mut http::request::Parts,
        state: &S,
    ) -> Result<T, Response> {
        T::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)
    }
}

/// The last argument, from the head: `(&&&Known::<T, S>::NEW).extract_last(..)`.
pub trait KnownLastParts<T, S> {
    /// `T::from_request_parts`, its rejection turned into its response.
    fn extract_last(
        &self,
        request: Request,
        state: &S,
    ) -> impl Future<Output = Result<T, Response>> + Send;
}

impl<T, S> KnownLastParts<T, S> for &&Known<T, S>
where
    S: Send + Sync,
    T: FromRequestParts<S>,
{
    async fn extract_last(&self, request: Request, state: &S) -> Result<T, Response> {
        let (mut parts, _) = request.into_parts();
        T::from_request_parts(&mut parts, state)
            .await
            .map_err(IntoResponse::into_response)
    }
}

/// The last argument, from the whole request.
pub trait KnownLastRequest<T, S> {
    /// `T::from_request`, its rejection turned into its response.
    fn extract_last(
        &self,
        request: Request,
        state: &S,
    ) -> impl Future<Output = Result<T, Response>> + Send;
}

impl<T, S> KnownLastRequest<T, S> for &Known<T, S>
where
    S: Send + Sync,
    T: FromRequest<S>,
{
    async fn extract_last(&self, request: Request, state: &S) -> Result<T, Response> {
        T::from_request(request, state)
            .await
            .map_err(IntoResponse::into_response)
    }
}

/// What a build that [`Declared`]'s checks failed would run: a misconfiguration answer.
pub trait KnownFallback<T, S> {
    /// Never an engine.
    fn idempotency(&self, _: &S) -> Result<Idempotency, Box<Response>> {
        Err(Box::new(misconfigured()))
    }

    /// Never an argument.
    fn extract_head(
        &self,
        _: &mut http::request::Parts,
        _: &S,
    ) -> impl Future<Output = Result<T, Response>> + Send {
        async { Err(misconfigured()) }
    }

    /// Never an argument.
    fn extract_last(&self, _: Request, _: &S) -> impl Future<Output = Result<T, Response>> + Send {
        async { Err(misconfigured()) }
    }
}

impl<T, S> KnownFallback<T, S> for Known<T, S> {}

fn misconfigured() -> Response {
    Problem(Rejection::Misconfigured {
        reason: "an argument the declared state does not extract",
    })
    .into_response()
}
