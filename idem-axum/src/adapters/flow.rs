//! One HTTP request through the engine, shared by the attribute and the layer: the key from its
//! header, the scope, the body and its fingerprint, then one call to the engine and its answer
//! as a response.
//!
//! Generated handlers call, in order: [`begin`] (key validation, before any extractor), their
//! `FromRequestParts` extractors, [`Started::body`] (scope resolution, body buffering and
//! fingerprinting), their body extractor, and [`Prepared::run`] (the engine runs the handler
//! once, or answers for the run that did). Extractor rejections return early from the generated
//! code, so they are never stored. The layer calls the same steps around its inner service.

use std::future::Future;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use bytes::Bytes;
use http::request::Parts;
use http::{Method, header};

use crate::http::capture::capture;
use crate::http::release::{ClientErrors, releases};
use crate::http::replay::{self, RawDigest};
use crate::http::request::read_body;
use crate::http::response::StoredResponse;
use crate::http::settings::reject;
use idem_core::endpoint::{Endpoint, KeyMode};
use idem_core::engine::{
    Answer, AtomicCommits, Attempt, InFlightMode, InvocationDeadline, Lending, OpName, Verdict,
};
use idem_core::fingerprint::{Previous, Version};
use idem_core::idempotency::Idempotency;
use idem_core::key::{IdempotencyKey, RecordKey, tenant_of};
use idem_core::rejection::Rejection;
use idem_core::rejection::{Settled, settle};
use idem_core::settings::limits::Limits;
use idem_core::settings::scope::Caller;

/// Marks a request an outer [`IdempotencyLayer`](crate::IdempotencyLayer) already made
/// idempotent, so an `#[idempotent]` handler under it does not claim a second record.
#[derive(Clone, Copy)]
pub(crate) struct Covered;

/// An idempotent HTTP operation, as the flow runs one request of it: an `#[idempotent]`
/// endpoint's settings, or a route's under the layer.
#[derive(Debug, Clone)]
pub(crate) struct HttpOperation {
    /// The identity of its records, metrics and traces.
    pub(crate) name: OpName,
    pub(crate) scope: &'static str,
    pub(crate) ttl: Duration,
    pub(crate) key: KeyMode,
    pub(crate) in_flight: InFlightMode,
    /// Client-error statuses released like a 5xx instead of stored.
    pub(crate) released: ClientErrors,
    /// Whether the handler may take a `Tx`: the store's transactions are lent to it.
    pub(crate) lends: bool,
    /// How atomic mode commits, where the store can claim inside a transaction.
    pub(crate) commits: AtomicCommits,
    /// The largest body read to fingerprint a request.
    pub(crate) max_request_bytes: usize,
}

impl HttpOperation {
    /// A request to an `#[idempotent]` endpoint, under its identity (see
    /// [`Endpoint::identity`]).
    fn of_endpoint(endpoint: &Endpoint, limits: &Limits, parts: &Parts) -> Self {
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(MatchedPath::as_str);
        Self {
            name: endpoint.identity(&parts.method, route),
            scope: endpoint.scope(),
            ttl: endpoint.ttl(),
            key: endpoint.key_mode(),
            in_flight: endpoint.in_flight(),
            // Extractor rejections return before the claim: every response the flow sees is
            // the handler's own.
            released: ClientErrors::NONE,
            lends: endpoint.atomic().is_some(),
            commits: endpoint.commits(),
            max_request_bytes: limits.max_request_bytes,
        }
    }
}

/// Step 1 for an `#[idempotent]` endpoint: decide whether this request is idempotent, validate
/// its key, and lend the store's transactions to a `Tx` extractor.
#[doc(hidden)]
// The error is the response to send back as it is; boxing it would only add an allocation.
#[allow(clippy::result_large_err)]
pub fn begin(
    idempotency: &Idempotency,
    endpoint: &'static Endpoint,
    parts: &mut Parts,
) -> Result<Started, Response> {
    if parts.extensions.get::<Covered>().is_some() {
        return Ok(Started {
            key: None,
            lending: None,
            operation: None,
        });
    }
    let engine = idempotency.engine();
    if let Some(need) = endpoint
        .atomic()
        .filter(|need| !need.is_met(engine.capabilities()))
    {
        // What `Builder::serves` would have refused at build: the handler cannot run.
        if idem_core::rejection::first_report(endpoint.handler()) {
            tracing::error!(
                endpoint = endpoint.handler(),
                database = need.database(),
                store = engine.store_name(),
                "an `#[idempotent]` handler takes a `Tx`, but its engine's store lends no \
             transactions on that database: answered 500 without running it; pass the handler \
             to `Builder::serves` to have this refuse the build instead"
            );
        }
        let reason = "the handler takes a `Tx` the engine's store cannot lend";
        return Err(reject(idempotency, Rejection::Misconfigured { reason }));
    }
    let operation = HttpOperation::of_endpoint(endpoint, idempotency.limits(), parts);
    start(idempotency, operation, parts)
}

/// Step 1: validate the request's key, and lend the store's transactions to a `Tx` extractor.
#[allow(clippy::result_large_err)]
pub(crate) fn start(
    idempotency: &Idempotency,
    operation: HttpOperation,
    parts: &mut Parts,
) -> Result<Started, Response> {
    let engine = idempotency.engine();
    let lending = operation.lends.then(|| engine.lending()).flatten();
    if let Some(lending) = &lending {
        parts.extensions.insert(lending.clone());
    }
    // Safe methods never touch the store.
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(Started {
            key: None,
            lending,
            operation: Some(operation),
        });
    }
    let header = idempotency.header_name();
    let key = match crate::http::request::key_from_headers(&parts.headers, header) {
        Ok(None) if operation.key == KeyMode::Required => {
            engine.count_invalid(&operation.name);
            let header = header.clone();
            return Err(reject(idempotency, Rejection::KeyMissing { header }));
        }
        Ok(key) => key,
        Err(reason) => {
            engine.count_invalid(&operation.name);
            tracing::debug!(endpoint = &*operation.name, %reason, "invalid idempotency key");
            let header = header.clone();
            return Err(reject(
                idempotency,
                Rejection::KeyInvalid { header, reason },
            ));
        }
    };
    Ok(Started {
        key,
        lending,
        operation: Some(operation),
    })
}

/// A request whose key is valid (or that is not idempotent), before its body is read.
#[doc(hidden)]
pub struct Started {
    key: Option<IdempotencyKey>,
    lending: Option<Lending>,
    /// `None` when an outer layer made the request idempotent.
    operation: Option<HttpOperation>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("key", &self.key)
            .field("operation", &self.operation)
            .finish_non_exhaustive()
    }
}

impl Started {
    /// Step 2: resolve the scope, buffer the body (honouring `DefaultBodyLimit`) and fingerprint
    /// the request. Returns the request to give the body extractor.
    pub async fn body(
        self,
        idempotency: &Idempotency,
        parts: Parts,
        body: Body,
    ) -> Result<(Prepared, Request), Response> {
        let (Some(key), Some(operation)) = (self.key, self.operation) else {
            let prepared = Prepared {
                attempt: None,
                lending: self.lending,
            };
            return Ok((prepared, Request::from_parts(parts, body)));
        };
        let engine = idempotency.engine();
        let caller = Caller::new(&parts.headers, &parts.extensions);
        let scope_value = match idempotency.scopes().resolve(operation.scope, &caller) {
            Ok(value) => value,
            Err(error) => {
                engine.count_invalid(&operation.name);
                tracing::debug!(
                    endpoint = &*operation.name,
                    scope = operation.scope,
                    ?error,
                    "the request's scope was not resolved"
                );
                let rejection = Rejection::of_scope(operation.scope, error);
                return Err(reject(idempotency, rejection));
            }
        };
        let (parts, bytes) = match read_body(parts, body, operation.max_request_bytes).await {
            Ok(read) => read,
            Err(rejection) => {
                engine.count_invalid(&operation.name);
                return Err(reject(idempotency, rejection));
            }
        };
        let content_type = parts.headers.get(header::CONTENT_TYPE);
        let record_key = RecordKey::derive(operation.scope, &scope_value, &operation.name, &key);
        let raw_of = || {
            crate::http::request::raw_digest_of_request(
                &parts.method,
                &parts.uri,
                content_type,
                &bytes,
            )
        };
        let (fingerprint, raw) = if engine.reads_in_process() {
            match replay_early(idempotency, &operation, &record_key, raw_of) {
                Early::Replayed(replay) => return Err(replay),
                // A completed record of another request (or of another serialisation): the
                // fingerprint decides, in one more pass.
                Early::NotTheSame(raw) => {
                    let fingerprint = crate::http::request::fingerprint_of_request(
                        &parts.method,
                        &parts.uri,
                        content_type,
                        &bytes,
                    );
                    (fingerprint, Some(raw))
                }
                // No completed record (a fresh request): both digests at once, one pass over
                // the body when it is canonical as written.
                Early::Nothing => {
                    let (fingerprint, raw) = crate::http::request::digests_of_request(
                        &parts.method,
                        &parts.uri,
                        content_type,
                        &bytes,
                    );
                    (fingerprint, Some(raw))
                }
            }
        } else {
            let fingerprint = crate::http::request::fingerprint_of_request(
                &parts.method,
                &parts.uri,
                content_type,
                &bytes,
            );
            (fingerprint, None)
        };
        let previous = {
            let (method, uri) = (parts.method.clone(), parts.uri.clone());
            let (content_type, body) = (content_type.cloned(), bytes.clone());
            Previous::new(move || {
                let (content_type, version) = (content_type.as_ref(), Version::PREVIOUS);
                crate::http::request::fingerprint_of_request_in(
                    &method,
                    &uri,
                    content_type,
                    &body,
                    version,
                )
            })
        };
        let attempt = Attempt {
            key: record_key,
            fingerprint,
            previous,
            tenant: tenant_of(operation.scope, &scope_value),
            scope: operation.scope,
            scope_value,
            ttl: operation.ttl,
            in_flight: operation.in_flight,
            lending: self.lending.clone(),
            commits: operation.commits,
            operation: operation.name,
            deadline: parts.extensions.get::<InvocationDeadline>().copied(),
        };
        let prepared = Prepared {
            attempt: Some(Keyed {
                attempt,
                released: operation.released,
                raw,
            }),
            lending: self.lending,
        };
        Ok((prepared, Request::from_parts(parts, Body::from(bytes))))
    }
}

/// What looking for a completed record before the fingerprint found.
enum Early {
    /// A retry of the very bytes of the completed request: its replay.
    Replayed(Response),
    /// A completed record, of another raw request (or one stored without its digest): this
    /// request's raw digest.
    NotTheSame(RawDigest),
    /// No completed record (the raw digest was not computed).
    Nothing,
}

/// A retry of the very bytes of a completed request, replayed before the fingerprint, the body
/// extractor and the claim, on stores that read in process (see [`crate::http::replay`]). The
/// raw digest (`raw`) is computed only when a completed record is there to compare it with.
/// Anything but a replay sends the request down the usual path, which also refuses a payload
/// that does not decode.
fn replay_early(
    idempotency: &Idempotency,
    operation: &HttpOperation,
    key: &RecordKey,
    raw: impl FnOnce() -> RawDigest,
) -> Early {
    let engine = idempotency.engine();
    let Some((stored, completed_at)) = engine.peek_completed(key) else {
        return Early::Nothing;
    };
    let raw = raw();
    let (Some(answered), payload) = replay::open(&stored) else {
        return Early::NotTheSame(raw);
    };
    if answered != raw {
        return Early::NotTheSame(raw);
    }
    let Ok(response) = StoredResponse::decode(payload) else {
        return Early::NotTheSame(raw);
    };
    let _span = idem_core::engine::span(&operation.name, key).entered();
    engine.count_replayed(&operation.name, completed_at);
    Early::Replayed(response.into_replay())
}

/// A request whose extractors all succeeded: ready for the engine.
#[doc(hidden)]
pub struct Prepared {
    attempt: Option<Keyed>,
    lending: Option<Lending>,
}

/// What an idempotent request hands the engine.
struct Keyed {
    attempt: Attempt,
    released: ClientErrors,
    /// The raw request's digest, kept with the response on stores that read in process.
    raw: Option<RawDigest>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("keyed", &self.attempt.is_some())
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// Step 3: the engine runs `handler` once for the request's record, or answers for the run
    /// that did. Once the record is claimed, the handler runs to its end and its response is
    /// stored even if the client hangs up.
    pub async fn run<F>(self, idempotency: &Idempotency, handler: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let Some(Keyed {
            attempt,
            released,
            raw,
        }) = self.attempt
        else {
            return run_without_key(idempotency, handler, self.lending).await;
        };
        let owned = idempotency.clone();
        let work = async move {
            let response = handler.await;
            if releases(response.status(), released) {
                return Verdict::Release(response);
            }
            let Some(captured) = capture(response, &owned).await else {
                return Verdict::Release(reject(&owned, Rejection::ResponseFailed));
            };
            let payload = match raw {
                Some(raw) => captured.stored.encode_after(&replay::envelope(&raw)),
                None => captured.stored.encode(),
            };
            Verdict::Keep {
                payload: Bytes::from(payload),
                status: Some(captured.stored.status().as_u16()),
                reply: captured.response,
            }
        };
        let decode = |payload: &[u8]| StoredResponse::decode(replay::open(payload).1);
        let answer = idempotency.engine().run(attempt, work, decode).await;
        respond(idempotency, answer)
    }
}

/// The engine's answer as a response.
fn respond<E>(idempotency: &Idempotency, answer: Answer<Response, StoredResponse, E>) -> Response {
    let retry_after = idempotency.engine().policy().retry_after;
    match settle(answer, retry_after) {
        Settled::Ran(response) => response,
        Settled::Replay(stored) => stored.into_replay(),
        Settled::Refused(rejection) => reject(idempotency, rejection),
    }
}

/// No idempotency key: the handler runs as it would without idem. A transaction it began
/// commits unless the response is a 5xx.
async fn run_without_key<F>(
    idempotency: &Idempotency,
    handler: F,
    lending: Option<Lending>,
) -> Response
where
    F: Future<Output = Response>,
{
    let response = handler.await;
    if let Some(returned) = lending.as_ref().and_then(Lending::returned) {
        if response.status().is_server_error() {
            return response; // `returned` rolls back when dropped
        }
        if let Err(error) = returned.commit().await {
            tracing::error!(error = &error as &dyn std::error::Error, "commit failed");
            let retry_after = idempotency.engine().policy().retry_after;
            return reject(idempotency, Rejection::StoreUnavailable { retry_after });
        }
    }
    response
}
