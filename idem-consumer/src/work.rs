//! The two ways a handler runs through the programmatic API: plain (`Operation::run`) and
//! atomic (`Operation::run_atomic`, the handler handed a lent transaction), each under the
//! handler deadline, with a panic caught as a failure.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use idem_core::operation::{Lent, OperationError, Outcome};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ConsumeError;
use crate::handler::{HandlerError, PayloadDigest};
use crate::options::Options;

/// Why a run of the handler did not produce an output.
#[derive(Debug)]
pub enum HandlerFailure<E> {
    /// The handler's own error.
    Handler(HandlerError<E>),
    /// It outlived the consumer's handler deadline and was stopped.
    Deadline(Duration),
    /// It panicked.
    Panicked,
}

impl<E: fmt::Display> fmt::Display for HandlerFailure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Handler(error) => write!(f, "{error}"),
            Self::Deadline(limit) => write!(f, "the handler ran longer than {limit:?}"),
            Self::Panicked => f.write_str("the handler panicked"),
        }
    }
}

/// What the engine answered for one delivery.
pub type Ran<T, E> = Result<Outcome<T>, OperationError<HandlerFailure<E>>>;

/// A run of the handler through the engine, boxed: one allocation per delivery.
pub type Running<T, E> = Pin<Box<dyn Future<Output = Ran<T, E>> + Send>>;

/// The types a handler's closure is generic over, held without owning any.
type Types<Args> = PhantomData<fn() -> Args>;

/// One delivery to run: its key (or a throw-away one), its payload's fingerprint, the
/// delivery `D` the handler is handed.
#[derive(Debug)]
pub struct Run<D> {
    /// The consumer's options.
    pub options: Arc<Options>,
    /// The key, or a throw-away one when unprotected.
    pub key: String,
    /// Whether `key` is the message's own (`false`: processed unprotected).
    pub protected: bool,
    /// The payload's fingerprint ([`PayloadDigest::of`]).
    pub digest: PayloadDigest,
    /// What the handler is handed.
    pub delivery: D,
}

/// A handler taking deliveries `D`, plain or atomic, as a consumer runs it: made by
/// [`plain`] or [`atomic`].
pub trait Work<D>: Send + Sync + 'static {
    /// What the handler returns, stored with the key's record.
    type Output: Serialize + DeserializeOwned + Send + 'static;
    /// Why it fails.
    type Error: fmt::Display + Send + 'static;

    /// Whether it can run with `options` (atomic mode: whether the engine's store lends its
    /// transactions), before anything is taken from the broker.
    fn check(&self, options: &Options) -> Result<(), ConsumeError>;

    /// Runs `run` through the engine: once per key, or the stored output.
    fn run(&self, run: Run<D>) -> Running<Self::Output, Self::Error>;
}

/// A handler taking the delivery alone: [`plain`].
pub struct Plain<H, D, Fut, T, E> {
    handler: Arc<H>,
    types: Types<(D, Fut, T, E)>,
}

/// `handler` in plain mode: its output is stored, its effects are its own.
pub fn plain<H, D, Fut, T, E>(handler: H) -> Plain<H, D, Fut, T, E>
where
    H: Fn(D) -> Fut,
    Fut: Future<Output = Result<T, HandlerError<E>>>,
{
    Plain {
        handler: Arc::new(handler),
        types: PhantomData,
    }
}

impl<H, D, Fut, T, E> Work<D> for Plain<H, D, Fut, T, E>
where
    H: Fn(D) -> Fut + Send + Sync + 'static,
    D: Send + 'static,
    Fut: Future<Output = Result<T, HandlerError<E>>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    type Output = T;
    type Error = E;

    fn check(&self, options: &Options) -> Result<(), ConsumeError> {
        options.check()
    }

    fn run(&self, run: Run<D>) -> Running<T, E> {
        let handler = Arc::clone(&self.handler);
        Box::pin(async move {
            let limit = run.options.handler_limit();
            let delivery = run.delivery;
            run.options
                .operation(run.protected)
                .fingerprint(run.digest.fingerprint())
                .run(run.key, (), move |()| guarded(handler(delivery), limit))
                .await
        })
    }
}

/// A handler taking a lent transaction and the delivery: [`atomic`].
pub struct Atomic<H, L, D, Fut, T, E> {
    handler: Arc<H>,
    types: Types<(L, D, Fut, T, E)>,
}

/// `handler` in atomic mode: handed a transaction `L` of the engine's store, its writes
/// commit with the key's record, or neither does.
pub fn atomic<H, L, D, Fut, T, E>(handler: H) -> Atomic<H, L, D, Fut, T, E>
where
    H: Fn(L, D) -> Fut,
    Fut: Future<Output = Result<T, HandlerError<E>>>,
{
    Atomic {
        handler: Arc::new(handler),
        types: PhantomData,
    }
}

impl<H, L, D, Fut, T, E> Work<D> for Atomic<H, L, D, Fut, T, E>
where
    H: Fn(L, D) -> Fut + Send + Sync + 'static,
    D: Send + 'static,
    L: Lent,
    Fut: Future<Output = Result<T, HandlerError<E>>> + Send + 'static,
    T: Serialize + DeserializeOwned + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    type Output = T;
    type Error = E;

    fn check(&self, options: &Options) -> Result<(), ConsumeError> {
        options.check_atomic::<L>()
    }

    fn run(&self, run: Run<D>) -> Running<T, E> {
        let handler = Arc::clone(&self.handler);
        Box::pin(async move {
            let limit = run.options.handler_limit();
            let delivery = run.delivery;
            run.options
                .operation(run.protected)
                .fingerprint(run.digest.fingerprint())
                .run_atomic::<L, _, _, _, _, _, _>(run.key, (), move |tx, ()| {
                    guarded(handler(tx, delivery), limit)
                })
                .await
        })
    }
}

/// Runs `handler` on a task of its own, so a panic is a failure like another, and stops it at
/// `limit`: its future (and the transaction it holds) is dropped before the failure is
/// returned, so the engine rolls back a transaction nobody still writes through.
async fn guarded<T, E, Fut>(handler: Fut, limit: Duration) -> Result<T, HandlerFailure<E>>
where
    Fut: Future<Output = Result<T, HandlerError<E>>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let mut task = tokio::spawn(handler);
    match tokio::time::timeout(limit, &mut task).await {
        Ok(Ok(result)) => result.map_err(HandlerFailure::Handler),
        Ok(Err(_panicked)) => Err(HandlerFailure::Panicked),
        Err(_elapsed) => {
            task.abort();
            let _ = task.await;
            Err(HandlerFailure::Deadline(limit))
        }
    }
}
