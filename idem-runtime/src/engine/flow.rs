//! One request through the engine: the state machine of SPEC section 3.
//!
//! Generated handlers call, in order: [`begin`] (key validation, before any extractor),
//! their `FromRequestParts` extractors, [`Pending::body`] (scope resolution, body buffering and
//! fingerprinting), their body extractor, and [`Ready::run`] (claim, execute or replay, store).
//! Extractor rejections return early from the generated code, so they are never stored.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::RequestExt;
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{Method, StatusCode, header};
use http_body_util::BodyExt;
use tracing::{Instrument, field};

use super::Idempotency;
use super::guard::OwnerGuard;
use crate::endpoint::{Endpoint, InFlightMode, KeyMode};
use crate::error::{Rejection, problem};
use crate::fingerprint::Fingerprint;
use crate::key::{IdempotencyKey, RecordKey};
use crate::response::StoredResponse;
use crate::store::{Claim, ClaimRequest, Fence, LeaseToken};

/// The outcome label of `idempotency_requests_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Executed,
    Replayed,
    InProgress,
    Reused,
    Invalid,
    Released,
    StoreError,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Executed => "executed",
            Self::Replayed => "replayed",
            Self::InProgress => "in_progress",
            Self::Reused => "reused",
            Self::Invalid => "invalid",
            Self::Released => "released",
            Self::StoreError => "store_error",
        }
    }
}

pub(crate) fn record(endpoint: &'static Endpoint, outcome: Outcome) {
    metrics::counter!(
        "idempotency_requests_total",
        "endpoint" => endpoint.name(),
        "outcome" => outcome.as_str()
    )
    .increment(1);
    tracing::Span::current().record("outcome", outcome.as_str());
    tracing::debug!(
        endpoint = endpoint.name(),
        outcome = outcome.as_str(),
        "idempotent request"
    );
}

/// Step 1: decide whether this request is idempotent and validate its key.
#[doc(hidden)]
// The error is the response to send back as it is; boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
pub fn begin(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    parts: &Parts,
) -> Result<Pending, Response> {
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(Pending(None));
    }
    let header = engine.header_name();
    match IdempotencyKey::from_headers(&parts.headers, header) {
        Ok(Some(key)) => Ok(Pending(Some(key))),
        Ok(None) if endpoint.key_mode() == KeyMode::Required => {
            record(endpoint, Outcome::Invalid);
            Err(Rejection::KeyMissing {
                header: header.clone(),
            }
            .into_response())
        }
        Ok(None) => Ok(Pending(None)),
        Err(reason) => {
            record(endpoint, Outcome::Invalid);
            tracing::debug!(endpoint = endpoint.name(), %reason, "invalid idempotency key");
            Err(Rejection::KeyInvalid {
                header: header.clone(),
                reason,
            }
            .into_response())
        }
    }
}

/// A request whose key is valid (or that is not idempotent), before its body is read.
#[doc(hidden)]
#[derive(Debug)]
pub struct Pending(Option<IdempotencyKey>);

impl Pending {
    /// Step 2: resolve the scope, buffer the body (honouring `DefaultBodyLimit`) and fingerprint
    /// the request. Returns the request to give the body extractor.
    pub async fn body(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        parts: Parts,
        body: Body,
    ) -> Result<(Ready, Request), Response> {
        let Some(key) = self.0 else {
            return Ok((Ready(None), Request::from_parts(parts, body)));
        };
        let scope_value = match engine.resolve_scope(endpoint.scope(), &parts) {
            Ok(Some(value)) => value,
            Ok(None) => {
                record(endpoint, Outcome::Invalid);
                let scope = endpoint.scope();
                return Err(Rejection::ScopeUnresolved { scope }.into_response());
            }
            Err(()) => {
                tracing::error!(
                    endpoint = endpoint.name(),
                    scope = endpoint.scope(),
                    "no resolver for the endpoint's scope"
                );
                let detail = "this endpoint's idempotency scope has no resolver on the engine";
                let problem = problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "idempotency_scope_unknown",
                    detail,
                    &[],
                );
                return Err(problem.into_response());
            }
        };
        let (parts, body) = Request::from_parts(parts, body)
            .with_limited_body()
            .into_parts();
        let bytes = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if is_length_limit(&error) => {
                record(endpoint, Outcome::Invalid);
                return Err(Rejection::PayloadTooLarge.into_response());
            }
            Err(error) => {
                tracing::debug!(
                    error = &error as &dyn std::error::Error,
                    "could not read request body"
                );
                return Err(problem(
                    StatusCode::BAD_REQUEST,
                    "request_body_unreadable",
                    "the request body could not be read",
                    &[],
                )
                .into_response());
            }
        };
        let fingerprint = Fingerprint::of_request(
            &parts.method,
            &parts.uri,
            parts.headers.get(header::CONTENT_TYPE),
            &bytes,
        );
        let record_key = RecordKey::derive(endpoint.scope(), &scope_value, endpoint.name(), &key);
        let ready = Ready(Some(Prepared {
            record_key,
            fingerprint,
        }));
        Ok((ready, Request::from_parts(parts, Body::from(bytes))))
    }
}

fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A request whose extractors all succeeded: ready to claim and run.
#[doc(hidden)]
#[derive(Debug)]
pub struct Ready(Option<Prepared>);

#[derive(Debug)]
struct Prepared {
    record_key: RecordKey,
    fingerprint: Fingerprint,
}

impl Ready {
    /// Step 3: claim the record, then run `handler`, replay, or refuse.
    pub async fn run<F>(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        handler: F,
    ) -> Response
    where
        F: Future<Output = Response> + Send,
    {
        if self.0.is_none() {
            return handler.await;
        }
        let execute = |key, token| execute(engine, endpoint, key, token, handler);
        let response = self.claim_then(engine, endpoint, execute).await;
        response.expect("the request has a key")
    }

    /// The record key of an idempotent request (`None` without a key).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn record_key(&self) -> Option<&RecordKey> {
        self.0.as_ref().map(|p| &p.record_key)
    }

    /// Like [`Ready::run`] for an idempotent request, with `execute` deciding how an acquired
    /// record is run. `None` (and `execute` unused) when the request carries no key.
    pub(crate) async fn claim_then<E, Fut>(
        self,
        engine: &Idempotency,
        endpoint: &'static Endpoint,
        execute: E,
    ) -> Option<Response>
    where
        E: FnOnce(RecordKey, LeaseToken) -> Fut,
        Fut: Future<Output = Response>,
    {
        let prepared = self.0?;
        let span = request_span(endpoint, &prepared.record_key);
        Some(
            claim_and_run(engine, endpoint, &prepared, execute)
                .instrument(span)
                .await,
        )
    }
}

fn request_span(endpoint: &'static Endpoint, key: &RecordKey) -> tracing::Span {
    tracing::info_span!(
        "idempotency",
        endpoint = endpoint.name(),
        key = %key.short(),
        outcome = field::Empty,
    )
}

/// Claims the record until the claim settles: runs `execute` when acquired, replays, refuses,
/// or (wait mode) polls a running duplicate.
async fn claim_and_run<E, Fut>(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    prepared: &Prepared,
    execute: E,
) -> Response
where
    E: FnOnce(RecordKey, LeaseToken) -> Fut,
    Fut: Future<Output = Response>,
{
    let policy = engine.policy();
    let waiting_since = Instant::now();
    let mut backoff = std::time::Duration::from_millis(10);
    loop {
        let token = LeaseToken::random();
        let now = engine.now();
        let request = ClaimRequest {
            key: &prepared.record_key,
            fingerprint: &prepared.fingerprint,
            token,
            now,
            lease_until: now.after(policy.lease),
            expires_at: now.after(endpoint.ttl()),
        };
        let started = Instant::now();
        let claim = engine.store().claim(request).await;
        tracing::debug!(store_ms = started.elapsed().as_secs_f64() * 1e3, "claim");
        match claim {
            Err(error) => {
                record(endpoint, Outcome::StoreError);
                tracing::error!(
                    error = &error as &dyn std::error::Error,
                    "idempotency store failed; refusing the request"
                );
                return Rejection::StoreUnavailable {
                    retry_after: policy.retry_after,
                }
                .into_response();
            }
            Ok(Claim::Acquired { took_over }) => {
                if took_over {
                    tracing::warn!("took over a record whose owner's lease lapsed");
                }
                return execute(prepared.record_key, token).await;
            }
            Ok(Claim::Completed { fingerprint, .. } | Claim::InFlight { fingerprint, .. })
                if fingerprint != prepared.fingerprint =>
            {
                record(endpoint, Outcome::Reused);
                return Rejection::KeyReused.into_response();
            }
            Ok(Claim::Completed { response, .. }) => {
                record(endpoint, Outcome::Replayed);
                return response.into_replay();
            }
            Ok(Claim::InFlight { .. }) => {
                let waited = waiting_since.elapsed();
                if endpoint.in_flight() == InFlightMode::Wait && waited < policy.wait_timeout {
                    tokio::time::sleep(backoff.min(policy.wait_timeout - waited)).await;
                    backoff = (backoff * 2).min(std::time::Duration::from_millis(250));
                    continue;
                }
                record(endpoint, Outcome::InProgress);
                return Rejection::InProgress {
                    retry_after: policy.retry_after,
                }
                .into_response();
            }
        }
    }
}

async fn execute<F>(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    key: RecordKey,
    token: LeaseToken,
    handler: F,
) -> Response
where
    F: Future<Output = Response> + Send,
{
    let (
        guard,
        Captured {
            parts,
            bytes,
            stored,
        },
    ) = match run_owned(engine, endpoint, key, token, handler, || ()).await {
        Ok(owned) => owned,
        Err(response) => return response,
    };
    let expires_at = engine.now().after(endpoint.ttl());
    match guard.complete(stored, expires_at).await {
        Ok(Fence::Held) => record(endpoint, Outcome::Executed),
        Ok(Fence::Lost) => {
            record(endpoint, Outcome::Executed);
            tracing::warn!(
                "lease lost while the handler ran: another request took over; this response was not stored"
            );
        }
        Err(error) => {
            record(endpoint, Outcome::StoreError);
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "could not store the response; the record frees when its lease lapses and a retry would run again"
            );
        }
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// A handler's response, buffered, with what to store for it.
pub(crate) struct Captured {
    pub(crate) parts: http::response::Parts,
    pub(crate) bytes: bytes::Bytes,
    pub(crate) stored: StoredResponse,
}

/// Runs the owner's handler, renewing its lease and catching a panic, and captures what to
/// store. A 5xx, a panic or a failed response body is not stored: `abandon` runs first (atomic
/// mode rolls back there), then the record is released so a retry runs again, and the answer
/// is returned as `Err` (a panic resumes instead).
pub(crate) async fn run_owned<F>(
    engine: &Idempotency,
    endpoint: &'static Endpoint,
    key: RecordKey,
    token: LeaseToken,
    handler: F,
    abandon: impl FnOnce(),
) -> Result<(OwnerGuard, Captured), Response>
where
    F: Future<Output = Response> + Send,
{
    let guard = OwnerGuard::new(engine.store().clone(), key, token);
    let outcome = with_renewal(engine, &key, token, CatchUnwind(Box::pin(handler))).await;
    let captured = match outcome {
        Ok(response) if !response.status().is_server_error() => capture(engine, response)
            .await
            .ok_or_else(|| StatusCode::INTERNAL_SERVER_ERROR.into_response()),
        Ok(response) => Err(response),
        Err(panic) => {
            abandon();
            release(guard, endpoint).await;
            resume_unwind(panic)
        }
    };
    match captured {
        Ok(captured) => Ok((guard, captured)),
        Err(response) => {
            abandon();
            release(guard, endpoint).await;
            Err(response)
        }
    }
}

async fn release(guard: OwnerGuard, endpoint: &'static Endpoint) {
    if let Err(error) = guard.release().await {
        tracing::warn!(
            error = &error as &dyn std::error::Error,
            "could not release the record; it frees when its lease lapses"
        );
    }
    record(endpoint, Outcome::Released);
}

/// Buffers a handler's response and builds what to store: the response itself, or the
/// too-large marker. `None` when the body stream failed.
async fn capture(engine: &Idempotency, response: Response) -> Option<Captured> {
    let (parts, body) = response.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            tracing::error!(
                error = &error as &dyn std::error::Error,
                "handler response body failed; releasing the record"
            );
            return None;
        }
    };
    let limit = engine.policy().max_response_bytes;
    let stored = if bytes.len() <= limit {
        StoredResponse::capture(parts.status, &parts.headers, bytes.clone())
    } else {
        too_large(parts.status, bytes.len(), limit)
    };
    Some(Captured {
        parts,
        bytes,
        stored,
    })
}

/// What retries of a request whose response was too large to keep receive instead.
fn too_large(status: StatusCode, len: usize, limit: usize) -> StoredResponse {
    let detail = format!(
        "a request with this idempotency key already completed with status {}, but its \
         {len}-byte response exceeded the {limit}-byte replay limit and was not kept; \
         the operation was not run again",
        status.as_u16()
    );
    let (status, headers, body) = problem(
        StatusCode::CONFLICT,
        "idempotency_response_too_large",
        &detail,
        &[("original_status", status.as_u16().into())],
    );
    StoredResponse::new(status, headers, body)
}

/// Runs `fut`, renewing the lease every third of its length until `fut` finishes.
pub(crate) async fn with_renewal<F: Future + Unpin>(
    engine: &Idempotency,
    key: &RecordKey,
    token: LeaseToken,
    mut fut: F,
) -> F::Output {
    let lease = engine.policy().lease;
    let renew = async {
        loop {
            tokio::time::sleep(lease / 3).await;
            let until = engine.now().after(lease);
            match engine.store().renew(key, token, until).await {
                Ok(Fence::Held) => {}
                Ok(Fence::Lost) => {
                    tracing::warn!("lease lost while the handler ran");
                    std::future::pending::<()>().await;
                }
                Err(error) => {
                    tracing::warn!(
                        error = &error as &dyn std::error::Error,
                        "could not renew the lease"
                    );
                }
            }
        }
    };
    tokio::select! {
        biased;
        out = &mut fut => out,
        () = renew => unreachable!("the renewal loop never ends"),
    }
}

/// Turns a panic while polling the handler into a value, so the record is released before the
/// panic continues.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future<Output = Response>> Future for CatchUnwind<F> {
    type Output = Result<Response, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(response)) => Poll::Ready(Ok(response)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}
