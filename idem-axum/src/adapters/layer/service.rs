//! The service the layer wraps around each route: covered requests go through the HTTP flow,
//! the inner service as their handler; the rest reach it untouched.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use tower::Service;

use super::route::Config;
use crate::adapters::flow::{self, Covered, HttpOperation};
use idem_core::idempotency::Idempotency;

/// The service [`IdempotencyLayer`](super::IdempotencyLayer) wraps around each route.
#[derive(Debug, Clone)]
pub struct IdempotencyService<S> {
    pub(super) inner: S,
    pub(super) idempotency: Idempotency,
    pub(super) config: Arc<Config>,
}

impl<S> IdempotencyService<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request> for IdempotencyService<S>
where
    S: Service<Request, Error = Infallible> + Clone + Send + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let limit = self.idempotency.limits().max_request_bytes;
        let Some(operation) = self.config.operation(&request, limit) else {
            let response = self.inner.call(request);
            return Box::pin(async move {
                let Ok(response) = response.await;
                Ok(response.into_response())
            });
        };
        // The inner service is ready; a clone takes its place for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let idempotency = self.idempotency.clone();
        Box::pin(async move { Ok(run(&idempotency, operation, inner, request).await) })
    }
}

/// One covered request through the HTTP flow, the inner service as its handler.
async fn run<S>(
    idempotency: &Idempotency,
    operation: HttpOperation,
    mut inner: S,
    request: Request,
) -> Response
where
    S: Service<Request, Error = Infallible> + Send + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
{
    let (mut parts, body) = request.into_parts();
    // An `#[idempotent]` handler (or another layer) inside runs as a plain one.
    parts.extensions.insert(Covered);
    let started = match flow::start(idempotency, operation, &mut parts) {
        Ok(started) => started,
        Err(response) => return response,
    };
    let (prepared, request) = match started.body(idempotency, parts, body).await {
        Ok(prepared) => prepared,
        Err(response) => return response,
    };
    let handler = async move {
        let Ok(response) = inner.call(request).await;
        response.into_response()
    };
    prepared.run(idempotency, handler).await
}
