//! AWS Lambda for idem: each request's [`InvocationDeadline`] from its invocation's context
//! ([`DeadlineLayer`] for `lambda_http` services, [`invocation_deadline`] for other functions),
//! so a record whose invocation timed out frees a second after its deadline.
//!
//! Applications use it through `idem-runtime` (feature `lambda`, module `idem_runtime::lambda`),
//! whose documentation shows it with the engine and handlers.

use std::task::{Context, Poll};

use lambda_http::RequestExt;

use idem_core::engine::InvocationDeadline;

/// The deadline of the invocation that carries `extensions`, from `lambda_http`'s context
/// ([`lambda_http::Context::deadline`], milliseconds since the Unix epoch); `None` without a
/// context, or when its deadline is beyond what a timestamp holds. Whether the engine believes
/// it (not past, not too far ahead) is the engine's rule: see [`InvocationDeadline`].
pub fn deadline_of(extensions: &http::Extensions) -> Option<InvocationDeadline> {
    invocation_deadline(extensions.lambda_context_ref()?)
}

/// The deadline of the invocation `context` describes ([`lambda_http::Context::deadline`]):
/// what a function that is not an HTTP one (an SQS consumer, say) gives the programmatic API's
/// `Operation::deadline`. `None` when it is beyond what a timestamp holds.
pub fn invocation_deadline(context: &lambda_http::Context) -> Option<InvocationDeadline> {
    let millis = i64::try_from(context.deadline).ok()?;
    Some(InvocationDeadline::from_epoch_millis(millis))
}

/// A tower layer that inserts each request's [`InvocationDeadline`], taken from its Lambda
/// invocation's context, for the idempotent handlers and layers under it. A request without a
/// Lambda context passes unchanged, and its records keep the configured lease.
///
/// Put it outside the routes it covers (`Router::layer` after the routes), so the deadline is
/// there before an `IdempotencyLayer` or an `#[idempotent]` handler claims the record.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer {
    _private: (),
}

impl DeadlineLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService { inner }
    }
}

/// The service of a [`DeadlineLayer`]: inserts the invocation's deadline, then calls `S`.
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for DeadlineService<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        if let Some(deadline) = deadline_of(request.extensions()) {
            request.extensions_mut().insert(deadline);
        }
        self.inner.call(request)
    }
}
