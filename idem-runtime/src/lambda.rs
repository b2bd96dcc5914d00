//! AWS Lambda: the same `#[idempotent]` handlers and router, served by [`lambda_http`].
//!
//! Lambda freezes the process between invocations, and ends an invocation at its deadline. Two
//! settings make idem's promises hold there:
//!
//! - [`DeadlineLayer`] gives each request the [`InvocationDeadline`] of the invocation serving
//!   it, read from `lambda_http`'s context: a record whose invocation timed out mid-handler
//!   frees a second after that deadline (a retry then runs again), instead of staying in flight
//!   until a lease nobody renews lapses. A deadline that is past (the local emulator sends
//!   `Lambda-Runtime-Deadline-Ms: 600000`, a time in 1970) or more than 15 minutes away leaves
//!   the configured [`lease`](crate::Builder::lease).
//! - [`Builder::background_work(false)`](crate::Builder::background_work): every write the
//!   engine makes for a request (its result, or the release of its key) is made, or given up,
//!   before the response leaves the function, so nothing waits for a frozen process.
//!
//! Records must live in a store that every instance of the function reaches (DynamoDB:
//! [`DynamoDbStore`](crate::store::DynamoDbStore), feature `dynamodb`); the sweeper is not
//! needed on stores that expire records themselves.
//!
//! ```no_run
//! use axum::{Router, routing::post};
//! use idem_runtime::{Idempotency, idempotent, lambda::DeadlineLayer, store::MemoryStore};
//!
//! #[idempotent(scope = "global")]
//! async fn create_charge(body: String) -> String {
//!     format!("charged: {body}")
//! }
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), lambda_http::Error> {
//!     let idempotency = Idempotency::builder()
//!         .store(MemoryStore::new()) // a shared store in production: `DynamoDbStore`
//!         .background_work(false)
//!         .build()?;
//!     let app = Router::new()
//!         .route("/v1/charges", post(create_charge))
//!         .with_state(idempotency)
//!         .layer(DeadlineLayer::new());
//!     lambda_http::run(app).await
//! }
//! ```

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
/// what a function that is not an HTTP one (an SQS consumer, say) gives
/// [`Operation::deadline`](crate::Operation::deadline). `None` when it is beyond what a
/// timestamp holds.
pub fn invocation_deadline(context: &lambda_http::Context) -> Option<InvocationDeadline> {
    let millis = i64::try_from(context.deadline).ok()?;
    Some(InvocationDeadline::from_epoch_millis(millis))
}

/// A tower layer that inserts each request's [`InvocationDeadline`], taken from its Lambda
/// invocation's context, for the idempotent handlers and layers under it. A request without a
/// Lambda context passes unchanged, and its records keep the configured lease.
///
/// Put it outside the routes it covers (`Router::layer` after the routes), so the deadline is
/// there before an [`IdempotencyLayer`](crate::IdempotencyLayer) or an `#[idempotent]`
/// handler claims the record.
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

#[cfg(test)]
mod tests;
